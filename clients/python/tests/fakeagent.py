"""A fake raftpace agent: the data plane of docs/dataplane.md, in memory.

One GCRA cursor per key (theoretical arrival time on the monotonic clock),
pauses, caps with slots, and hooks to misbehave: scripted error answers,
slow answers, dropped requests, connections closed while idle.
"""

import http.server
import itertools
import json
import os
import socket
import socketserver
import struct
import tempfile
import threading
import time
import urllib.parse


class UnixHTTPServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name = "fake-agent"
        self.server_port = 0


class TCPHTTPServer(http.server.ThreadingHTTPServer):
    pass


_FIELDS = {
    "reserve": {"n", "max_wait"},
    "wait": {"n", "timeout"},
    "forfeit": {"n"},
    "pauses": {"seconds", "for"},
    "slots": {"keys", "ttl", "max_wait"},
}


class _Answer(Exception):
    def __init__(self, status, body, headers=None):
        self.status, self.body, self.headers = status, body, headers or {}


def _err(status, code, msg, **extra):
    b = {"error": msg, "code": code}
    b.update(extra)
    h = {}
    if code in ("no_leader", "stopped", "overloaded"):
        h["Retry-After"] = "1"
    return _Answer(status, b, h)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-raftpace"

    def setup(self):
        super().setup()
        agent = self.server.agent
        with agent.lock:
            self.conn_id = next(agent._conn_ids)
        self.peer_pid = None
        if self.server.address_family == socket.AF_UNIX and hasattr(socket, "SO_PEERCRED"):
            cred = self.connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            self.peer_pid = struct.unpack("3i", cred)[0]

    def log_message(self, fmt, *args):
        pass

    def address_string(self):
        return "unix" if self.server.address_family == socket.AF_UNIX else self.client_address[0]

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_DELETE(self):
        self._serve("DELETE")

    def do_PUT(self):
        self._serve("PUT")

    def _serve(self, method):
        agent = self.server.agent
        start = time.monotonic()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        with agent.lock:
            agent.requests.append((self.conn_id, self.peer_pid, method, self.path, raw))
        if agent.drop_next > 0:
            with agent.lock:
                agent.drop_next -= 1
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            status, body, headers = 200, agent.route(self, method, self.path, raw, start), {}
        except _Answer as a:
            status, body, headers = a.status, a.body, a.headers
        if isinstance(body, tuple):
            status, body = body
        delay = agent.slow_answer(method, self.path) if agent.slow_answer else 0.0
        if isinstance(body, dict) and "held" in body:
            body["held"] = time.monotonic() - start
        if delay:
            time.sleep(delay)  # the answer's moment is before this: held excludes it
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)
        if agent.close_idle:
            # close without "Connection: close": the client finds out when
            # it next uses the connection, like an agent's idle timeout
            self.close_connection = True


class FakeAgent(object):
    def __init__(self, tcp=False, token=None, grace=0.5):
        self.grace = grace
        self.token = token
        self.lock = threading.Condition()
        self.limits = {}  # key -> (rate, burst)
        self.caps = {}  # key -> cap
        self.tat = {}  # key -> theoretical arrival time
        self.pauses = {}  # key -> until
        self.slots = {}  # id -> (keys, until)
        self.forfeits = []  # (key, n)
        self.grants = []  # (key, n, go_at on the agent's clock)
        self.requests = []  # (conn_id, peer_pid, method, path, raw)
        self.fail_next = []  # [(route-prefix, status, body, headers)]
        self.slow_answer = None  # callable(method, path) -> seconds, or None
        self.drop_next = 0
        self.close_idle = False
        self._conn_ids = itertools.count(1)
        self._slot_ids = itertools.count(1)
        if tcp:
            self.server = TCPHTTPServer(("127.0.0.1", 0), Handler)
            self.url = "127.0.0.1:%d" % self.server.server_address[1]
            self.socket_path = None
            self._dir = None
        else:
            self._dir = tempfile.mkdtemp(prefix="rp-fake-")
            self.socket_path = os.path.join(self._dir, "agent.sock")
            self.server = UnixHTTPServer(self.socket_path, Handler)
            self.url = None
        self.server.agent = self
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        if self._dir:
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
            os.rmdir(self._dir)

    # ---------------------------------------------------------------
    def set_limit(self, key, rate, burst=1):
        with self.lock:
            self.limits[key] = (float(rate), int(burst))

    def set_cap(self, key, cap):
        with self.lock:
            self.caps[key] = int(cap)

    def count(self, method, prefix):
        with self.lock:
            return sum(1 for r in self.requests if r[2] == method and r[3].startswith(prefix))

    # ---------------------------------------------------------------
    def route(self, h, method, path, raw, start):
        if self.token is not None and h.headers.get("Authorization") != "Bearer " + self.token:
            raise _err(401, "unauthorized", "missing or wrong token")
        with self.lock:
            for i, (prefix, status, body, headers) in enumerate(self.fail_next):
                if path.startswith(prefix):
                    del self.fail_next[i]
                    raise _Answer(status, body, headers)
        parts = path.split("?")[0].split("/")
        if len(parts) < 3 or parts[1] != "v1":
            raise _err(404, "not_found", "no such route")
        route = parts[2]
        arg = urllib.parse.unquote(parts[3]) if len(parts) > 3 else None
        body = {}
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError:
                raise _err(400, "invalid", "body is not JSON", field="body")
            if not isinstance(body, dict):
                raise _err(400, "invalid", "body is not an object", field="body")
        for k in body:
            if k not in _FIELDS.get(route, set()):
                raise _err(400, "invalid", "unknown field %r" % k, field=k)
        if route == "reserve" and method == "POST":
            return self._reserve(arg, int(body.get("n", 1)), float(body.get("max_wait", 0)))
        if route == "wait" and method == "POST":
            ans = self._reserve(arg, int(body.get("n", 1)), float(body.get("timeout", 60)))
            time.sleep(ans["wait"])
            return {"wait": 0.0, "use_by": self.grace, "held": 0.0}
        if route == "forfeit" and method == "POST":
            self._limit(arg)
            with self.lock:
                self.forfeits.append((arg, int(body.get("n", 1))))
            return {}
        if route == "pauses" and method in ("POST", "GET"):
            return self._pause(arg, method, body)
        if route == "limits" and method == "GET":
            rate, burst = self._limit(arg)
            return {"key": arg, "rate": rate, "burst": burst}
        if route == "slots" and method == "POST" and arg is None:
            return self._take(body, start)
        if route == "slots" and method == "DELETE" and arg:
            with self.lock:
                if arg not in self.slots:
                    if arg.startswith("s-gone"):
                        raise _err(404, "unknown_slot", "no slot %s" % arg)
                    return (204, None)
                del self.slots[arg]
                self.lock.notify_all()
            return (204, None)
        raise _Answer(405, {"error": "method not allowed", "code": "method_not_allowed"})

    def _limit(self, key):
        with self.lock:
            if key not in self.limits:
                raise _err(404, "unknown_key", "no limit for %r" % key)
            return self.limits[key]

    def _reserve(self, key, n, max_wait):
        rate, burst = self._limit(key)
        if n < 1 or n > burst:
            raise _err(400, "invalid", "n must be in [1, burst]", field="n")
        if max_wait < 0:
            raise _err(400, "invalid", "max_wait must be >= 0", field="max_wait")
        with self.lock:
            now = time.monotonic()
            paused = self.pauses.get(key, 0.0) - now
            if paused > max_wait:
                raise _err(429, "paused", "paused", remaining=paused)
            t = 1.0 / rate
            tat = max(self.tat.get(key, now), now, self.pauses.get(key, 0.0) - (burst - n) * t)
            new_tat = tat + n * t
            go = max(new_tat - burst * t, now)
            wait = go - now
            if wait > max_wait + 1e-9:
                raise _err(429, "limit_exceeded", "wait %.3fs exceeds max_wait" % wait, wait=wait)
            self.tat[key] = new_tat
            self.grants.append((key, n, go))
            return {"wait": wait, "use_by": wait + self.grace, "held": 0.0}

    def _pause(self, key, method, body):
        self._limit(key)
        with self.lock:
            now = time.monotonic()
            if method == "POST":
                secs = body.get("seconds")
                if not isinstance(secs, (int, float)) or not (0 < secs <= 86400):
                    raise _err(400, "invalid", "seconds must be in (0, 86400]", field="seconds")
                self.pauses[key] = max(self.pauses.get(key, 0.0), now + secs)
            rem = max(0.0, self.pauses.get(key, 0.0) - now)
            return {"key": key, "remaining_s": rem, "remaining": "%gs" % rem, "remaining_ns": int(rem * 1e9)}

    def _take(self, body, start):
        keys = body.get("keys") or []
        ttl = float(body.get("ttl", 60))
        max_wait = float(body.get("max_wait", 0))
        with self.lock:
            for k in keys:
                if k not in self.caps:
                    raise _err(404, "unknown_key", "no cap for %r" % k)
            end = time.monotonic() + max_wait
            while True:
                now = time.monotonic()
                for sid in [s for s, (_, until) in self.slots.items() if until <= now]:
                    del self.slots[sid]
                full = [k for k in keys
                        if sum(1 for ks, _ in self.slots.values() if k in ks) >= self.caps[k]]
                if not full:
                    break
                if now >= end:
                    raise _err(429, "concurrency_limit", "caps full", full=full)
                self.lock.wait(end - now)
            sid = "s-%d" % next(self._slot_ids)
            self.slots[sid] = (list(keys), now + ttl)
            return {"id": sid, "keys": list(keys), "deadline": ttl - (time.monotonic() - start), "held": 0.0}
