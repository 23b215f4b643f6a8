"""Celery integration: pace tasks without holding worker children.

``import raftpace`` does not import this module, and this module imports
Celery only for ``PacedTask`` (the ``paced`` decorator needs no Celery).

A Celery worker child that sleeps for a rate limit is a child doing
nothing. So a paced task asks the agent for its events with
``max_wait=max_block``:

- granted within max_block: it sleeps that little (on its own monotonic
  clock, forfeiting grants it comes back to too late, or when the key was
  paused fleet-wide while it slept) and runs;
- the wait is longer (LimitExceeded), the key is paused (Paused), or the
  agent cannot answer (Unavailable): nothing was consumed, and the task
  raises ``task.retry(countdown=delay)`` with the agent's hint, freeing the
  child; the broker redelivers it later. Retries count against the task's
  ``max_retries`` as usual: set ``max_retries=None`` for paced tasks that
  must not be dropped.
- the provider answers 429/503 with Retry-After (the task body raises
  urllib's HTTPError or requests' HTTPError, or ``ProviderLimited``): the
  key is paused fleet-wide for that long (capped at 24 h) and the task
  retried after it.

Usage, decorator::

    from raftpace.celery import paced

    client = raftpace.Client()

    @app.task(bind=True, max_retries=None)
    @paced(client, "acme", max_block=1.0)
    def call_acme(self, order_id):
        ...

``key`` may be a callable of the task's arguments
(``key=lambda order_id: "acme:" + tenant_of(order_id)``); ``client`` may be
a callable returning the client (to create it lazily in each worker child).

Usage, base class::

    from raftpace.celery import PacedTask

    class AcmeTask(PacedTask):
        raftpace_client = client      # or a callable returning one
        raftpace_key = "acme"
        raftpace_max_block = 1.0

    @app.task(bind=True, base=AcmeTask, max_retries=None)
    def call_acme(self, order_id): ...
"""

import functools
import random

from .errors import LimitExceeded, Paused, Unavailable
from .retry_after import pause_for

__all__ = ["paced", "ProviderLimited", "admit_or_retry", "PacedTask"]


class ProviderLimited(Exception):
    """Raise from a task body when the provider said "slow down" for
    ``retry_after`` seconds: the key is paused fleet-wide and the task
    retried after it."""

    def __init__(self, retry_after, message="provider rate limited"):
        super().__init__(message)
        self.retry_after = float(retry_after)

    def __reduce__(self):  # picklable: a prefork child sends its Retry(exc=...) to the parent
        return (type(self), (self.retry_after, str(self)))


def _retry_exc(exc, secs):
    """What task.retry carries for a provider's "slow down": the exception
    itself when it is a ProviderLimited, else a ProviderLimited naming it.
    The prefork pool pickles it, and urllib's HTTPError (it holds the
    response's file) cannot be pickled: passing it failed the task with
    MaybeEncodingError instead of retrying it."""
    if isinstance(exc, ProviderLimited):
        return exc
    return ProviderLimited(secs, "provider rate limited for %.3gs: %s: %s" % (secs, type(exc).__name__, exc))


def _resolve(client):
    if callable(client) and not hasattr(client, "reserve_grant"):
        return client()
    return client


def _jitter(d):
    # spread the fleet's retries a little so they do not all return at once
    return d + random.uniform(0.0, min(1.0, 0.1 * d + 0.05))


def admit_or_retry(task, client, key, n=1, max_block=1.0):
    """Admits n events of key now (sleeping at most about max_block) or
    raises task.retry(countdown=...) with nothing consumed."""
    try:
        g = client._usable_grant([(key, n)], max_block)
    except LimitExceeded as e:  # and Paused
        raise task.retry(countdown=_jitter(max(e.wait, 0.01)), exc=e)
    except Unavailable as e:
        raise task.retry(countdown=_jitter(max(e.retry_after, 0.1)), exc=e)
    if g.wait > 0:
        client._sleep_until(g.go_at)
        # A pause set while we slept (another worker's provider 429) binds
        # this grant too: the agent granted it before the pause existed.
        # Checked only after a sleep: a grant that goes at once went before
        # any pause set since. A failed check lets the grant go.
        try:
            left = client.paused_for(key)
        except Exception:
            left = 0.0
        if left > 0:
            client.forfeit(key, n)
            raise task.retry(countdown=_jitter(left),
                             exc=Paused("raftpace: %r was paused while waiting for its grant" % (key,),
                                        remaining=left))
    if g.late(client._clock()):
        client.forfeit(key, n)
        raise task.retry(countdown=_jitter(0.01),
                         exc=Unavailable("raftpace: the grant for %r came too late to be used" % (key,),
                                         code="late", retry_after=0.01))


def _provider_pause(client, key, exc):
    if isinstance(exc, ProviderLimited):
        secs = exc.retry_after
        if secs > 0:
            try:
                client.pause(key, min(secs, 86400.0))
            except Exception:
                pass
        return secs
    secs = pause_for(exc)
    if secs is not None and secs > 0:
        client.observe(key, exc)
    return secs


def paced(client, key, n=1, max_block=1.0):
    """Decorator for a bound Celery task function (``bind=True``)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(task, *args, **kwargs):
            c = _resolve(client)
            k = key(*args, **kwargs) if callable(key) else key
            admit_or_retry(task, c, k, n, max_block)
            try:
                return fn(task, *args, **kwargs)
            except Exception as e:
                secs = _provider_pause(c, k, e)
                if secs is None:
                    raise
                raise task.retry(countdown=_jitter(max(secs, 0.01)), exc=_retry_exc(e, secs))
        return wrapper
    return deco


def _make_paced_task():
    from celery import Task  # imported only when PacedTask is asked for

    class PacedTask(Task):
        abstract = True
        raftpace_client = None  # a Client, or a callable returning one
        raftpace_key = None  # a str, or a callable of the task's arguments
        raftpace_n = 1
        raftpace_max_block = 1.0

        def __call__(self, *args, **kwargs):
            c = _resolve(self.raftpace_client)
            k = self.raftpace_key(*args, **kwargs) if callable(self.raftpace_key) else self.raftpace_key
            admit_or_retry(self, c, k, self.raftpace_n, self.raftpace_max_block)
            try:
                return super().__call__(*args, **kwargs)
            except Exception as e:
                secs = _provider_pause(c, k, e)
                if secs is None:
                    raise
                raise self.retry(countdown=_jitter(max(secs, 0.01)), exc=_retry_exc(e, secs))

    return PacedTask


def __getattr__(name):  # PEP 562: PacedTask imports celery on first use
    if name == "PacedTask":
        cls = _make_paced_task()
        globals()["PacedTask"] = cls
        return cls
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
