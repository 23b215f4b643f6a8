"""The Celery app of tests/with_celery.py, run by a real worker:

    celery -A tests.celery_app worker --pool=prefork --concurrency=2

Configured by the environment the test gives the worker:
RP_CELERY_BROKER (redis URL, broker and result backend), RP_AGENT_SOCKET
(the agent's --socket), RP_KEY, RP_MAX_BLOCK, RP_PROVIDER_URL (the fake
provider) and RP_EVENTS (a file each attempt appends one JSON line to).

Every time is time.monotonic(): CLOCK_MONOTONIC is one clock for every
process of the machine, so the test compares them with its own.
"""

import functools
import json
import os
import time
import urllib.request

from celery import Celery
from celery.exceptions import Retry

import raftpace
from raftpace.celery import paced

BROKER = os.environ.get("RP_CELERY_BROKER", "redis://127.0.0.1:6379/0")
KEY = os.environ.get("RP_KEY", "celery-acme")
MAX_BLOCK = float(os.environ.get("RP_MAX_BLOCK", "0.1"))
PROVIDER = os.environ.get("RP_PROVIDER_URL", "")
EVENTS = os.environ.get("RP_EVENTS", "")

app = Celery("rp_celery_test", broker=BROKER, backend=BROKER)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def record(**ev):
    if not EVENTS:
        return
    line = (json.dumps(ev) + "\n").encode()
    fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one O_APPEND write: lines of processes do not interleave
    finally:
        os.close(fd)


class RecordingClient(raftpace.Client):
    """Records when each fleet-wide pause was asked for and answered."""

    def pause(self, key, seconds):
        sent = time.monotonic()
        left = super().pause(key, seconds)
        record(kind="pause", key=key, seconds=seconds, sent=sent, done=time.monotonic(), pid=os.getpid())
        return left


_client = None


def client():
    # created lazily in each worker child (a Client also survives fork)
    global _client
    if _client is None:
        _client = RecordingClient(socket=os.environ["RP_AGENT_SOCKET"], timeout=10)
    return _client


def instrumented(fn):
    """Records one line per attempt: when it began, when the body began
    (None when admission retried it), when it ended and how."""
    @functools.wraps(fn)
    def wrapper(task, i):
        t0 = time.monotonic()
        state = {"body": None}
        try:
            out = fn(task, i, _state=state)
        except Retry as e:
            exc = getattr(e, "exc", None)
            record(kind="attempt", i=i, retries=task.request.retries, start=t0, body=state["body"],
                   end=time.monotonic(), outcome="retry", reason=type(exc).__name__ if exc else None,
                   pid=os.getpid())
            raise
        except BaseException as e:
            record(kind="attempt", i=i, retries=task.request.retries, start=t0, body=state["body"],
                   end=time.monotonic(), outcome="error", reason=repr(e), pid=os.getpid())
            raise
        record(kind="attempt", i=i, retries=task.request.retries, start=t0, body=state["body"],
               end=time.monotonic(), outcome="ok", reason=None, pid=os.getpid())
        return out
    return wrapper


@app.task(bind=True, max_retries=None, name="rp.call_provider")
@instrumented
@paced(client, KEY, max_block=MAX_BLOCK)
def call_provider(self, i, _state=None):
    if _state is not None:
        _state["body"] = time.monotonic()
    # the provider's 429 (urllib's HTTPError) propagates: paced() pauses the key
    with urllib.request.urlopen("%s/call?i=%d" % (PROVIDER, i), timeout=10) as r:
        r.read()
    return i
