"""A real one-node agent for tests and benchmarks.

    from raftpace.testing import Agent
    with Agent("/usr/local/bin/raftpace") as agent:   # or RAFTPACE_BINARY
        agent.set_limit("acme", rate=5, burst=1)
        client = raftpace.Client(socket=agent.socket)

``Agent`` starts ``raftpace agent`` as a cluster of one (``--raft-timing
fast``, its own temporary directory, loopback addresses chosen by the
system) and returns once it is ready: its ready file names the HTTP
address, the socket exists, and ``/readyz`` answers 200 (the node has a
leader and holds its share; before that a reservation is a retryable 503).
It never falls back to anything: an agent that does not start raises
``AgentError`` with the end of its log.
"""

import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .client import Client
from .errors import UnknownKey

__all__ = ["Agent", "AgentError"]


class AgentError(AssertionError):
    """The agent did not start, or a command against it failed. An
    AssertionError, so a test that meets it fails rather than errs."""


class Agent:
    """A ``raftpace agent`` process of one node. ``extra_args`` are added to
    its command line (e.g. ``["--use-grace", "50ms"]``); ``tmp`` is a
    directory to use (default a new one, removed by stop unless ``keep``)."""

    def __init__(self, binary=None, extra_args=(), tmp=None, start_timeout=None, keep=False):
        self.binary = binary or os.environ.get("RAFTPACE_BINARY", "")
        if not self.binary:
            raise AgentError("no raftpace binary: pass one or set RAFTPACE_BINARY")
        self.start_timeout = start_timeout or float(os.environ.get("RAFTPACE_START_TIMEOUT", "30"))
        self._own_tmp = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="rp-py-agent-")
        os.makedirs(self.tmp, exist_ok=True)
        self.keep = keep
        self.socket = os.path.join(self.tmp, "a.sock")
        self.log_path = os.path.join(self.tmp, "agent.log")
        self.http = None
        self.proc = None
        self._ready = os.path.join(self.tmp, "ready.json")
        self._args = [self.binary, "agent", "--node-id", "a", "--bootstrap-expect", "1",
                      "--data-dir", os.path.join(self.tmp, "data"), "--socket", self.socket,
                      "--http", "127.0.0.1:0", "--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
                      "--raft-timing", "fast", "--ready-file", self._ready, "--leave-on-terminate=false"]
        self._args += list(extra_args)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    @property
    def pid(self):
        return self.proc.pid

    def start(self):
        """Start the agent and wait until it is ready (see the module doc)."""
        log = open(self.log_path, "wb")
        try:
            # Its own session: a test's SIGINT or its process group's signals
            # do not reach it; stop() ends it.
            self.proc = subprocess.Popen(self._args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            self.stop()
            raise AgentError("%s does not run: %s" % (self.binary, e))
        finally:
            log.close()
        try:
            self.http = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self):
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AgentError("the agent exited with %s before it was ready:\n%s"
                                 % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self._ready) and os.path.exists(self.socket):
                try:
                    with open(self._ready) as f:
                        doc = json.load(f)
                except ValueError:
                    doc = None  # being written
                if doc and doc.get("http_addr") and _ready(doc["http_addr"]):
                    return doc["http_addr"]
            time.sleep(0.1)
        raise AgentError("the agent was not ready (ready file with http_addr, socket %s, /readyz 200) within %gs:\n%s"
                         % (self.socket, self.start_timeout, self.log_tail()))

    def cli(self, *args, timeout=30):
        """Run ``raftpace ARGS --addr HTTP`` against this agent; its stdout.
        A token in the environment is not passed (the agent has none)."""
        env = dict(os.environ)
        env.pop("RAFTPACE_TOKEN", None)
        r = subprocess.run([self.binary] + list(args) + ["--addr", self.http], capture_output=True, text=True,
                           timeout=timeout, env=env)
        if r.returncode != 0:
            raise AgentError("raftpace %s: exit %d: %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def set_limit(self, key, rate, burst, timeout=15.0, quota=None):
        """Set key's limit with ``raftpace limit set`` (and ``--quota``, as
        "100/day", when given) and return it, as Client.get_limit does
        ((rate, burst)), once the socket reads it."""
        extra = ["--quota", quota] if quota else []
        self.cli("limit", "set", key, "--rate", "%r" % float(rate), "--burst", str(burst), *extra)
        c = Client(socket=self.socket, timeout=10)
        try:
            end = time.monotonic() + timeout
            while True:
                try:
                    return c.get_limit(key)
                except UnknownKey:
                    if time.monotonic() > end:
                        raise
                    time.sleep(0.1)
        finally:
            c.close()

    def stop(self, timeout=10.0):
        """SIGTERM the agent (SIGKILL after timeout) and remove its
        directory unless it was given or keep is set."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._own_tmp and not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _ready(addr):
    host, _, port = addr.rpartition(":")
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=1)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except OSError:
        return False
