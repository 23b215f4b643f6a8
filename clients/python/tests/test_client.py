import os
import threading
import time
import unittest
import warnings
from unittest import mock

import raftpace
from raftpace import _transport

from .fakeagent import FakeAgent


class AgentCase(unittest.TestCase):
    tcp = False
    token = None
    grace = 0.5  # generous: a loaded machine must not make grants late

    def setUp(self):
        self.agent = FakeAgent(tcp=self.tcp, token=self.token, grace=self.grace)
        self.addCleanup(self.agent.close)
        if self.tcp:
            self.client = raftpace.Client(url=self.agent.url, token=self.token, timeout=5)
        else:
            self.client = raftpace.Client(socket=self.agent.socket_path, timeout=5)
        self.addCleanup(self.client.close)


class ConfigTest(unittest.TestCase):
    def test_neither_set(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(raftpace.ConfigError) as cm:
                raftpace.Client()
        self.assertIsInstance(cm.exception, raftpace.Error)
        self.assertIn("RAFTPACE_SOCKET", str(cm.exception))

    def test_env_socket_wins(self):
        env = {"RAFTPACE_SOCKET": "/tmp/x.sock", "RAFTPACE_ADDR": "127.0.0.1:7402", "RAFTPACE_TOKEN": " t "}
        with mock.patch.dict(os.environ, env, clear=True):
            c = raftpace.Client()
        self.assertEqual(c.socket_path, "/tmp/x.sock")
        self.assertIsNone(c.address)
        self.assertNotIn("Authorization", c._headers)  # no token on the socket

    def test_explicit_socket_wins(self):
        c = raftpace.Client(socket="/tmp/y.sock", url="127.0.0.1:1")
        self.assertEqual(c.socket_path, "/tmp/y.sock")

    def test_addr_forms(self):
        with mock.patch.dict(os.environ, {"RAFTPACE_ADDR": "http://127.0.0.1:7402", "RAFTPACE_TOKEN": "tok"},
                             clear=True):
            c = raftpace.Client()
        self.assertEqual(c.address, ("127.0.0.1", 7402))
        self.assertEqual(c._headers["Authorization"], "Bearer tok")
        self.assertEqual(raftpace.Client(url="[::1]:9").address, ("::1", 9))
        self.assertEqual(raftpace.Client(url="agent:80").address, ("agent", 80))
        for bad in ("nope", "https://x:1", "x:y"):
            with self.assertRaises(raftpace.ConfigError):
                raftpace.Client(url=bad)

    def test_escape_key(self):
        self.assertEqual(raftpace.escape_key("a/b?c%d é"), "a%2Fb%3Fc%25d%20%C3%A9")
        self.assertEqual(raftpace.escape_key("team:42@x=1&y+$"), "team:42@x=1&y+$")
        with self.assertRaises(raftpace.InvalidRequest):
            raftpace.escape_key("")


class MethodsTest(AgentCase):
    def test_reserve_and_limit(self):
        self.agent.set_limit("a/b é", 10, 2)
        self.assertEqual(self.client.get_limit("a/b é"), (10.0, 2))
        self.assertEqual(self.client.reserve("a/b é"), 0.0)
        self.assertEqual(self.client.reserve("a/b é"), 0.0)
        d = self.client.reserve("a/b é", max_wait=1)
        self.assertGreater(d, 0.05)
        self.assertLessEqual(d, 0.1)
        self.assertTrue(any("/v1/reserve/a%2Fb%20%C3%A9" == r[3] for r in self.agent.requests))

    def test_reserve_grant(self):
        self.agent.set_limit("k", 100, 1)
        g = self.client.reserve_grant("k")
        self.assertLessEqual(g.sent, g.recv)
        self.assertAlmostEqual(g.go_at, g.recv + g.wait)
        self.assertAlmostEqual(g.use_by, g.sent + g.held + g.use_by_s)
        self.assertTrue(g.usable())

    def test_limit_exceeded_consumes_nothing(self):
        self.agent.set_limit("k", 1, 1)
        self.client.reserve("k")
        with self.assertRaises(raftpace.LimitExceeded) as cm:
            self.client.reserve("k", max_wait=0.5)
        self.assertEqual(cm.exception.code, "limit_exceeded")
        self.assertGreater(cm.exception.wait, 0.5)
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)

    def test_pause(self):
        self.agent.set_limit("k", 100, 1)
        self.assertEqual(self.client.paused_for("k"), 0.0)
        self.assertAlmostEqual(self.client.pause("k", 30), 30.0, delta=0.5)
        self.assertAlmostEqual(self.client.pause("k", 5), 30.0, delta=0.5)  # the longer one stays
        self.assertAlmostEqual(self.client.paused_for("k"), 30.0, delta=0.5)
        with self.assertRaises(raftpace.Paused) as cm:
            self.client.reserve("k", max_wait=1)
        self.assertIsInstance(cm.exception, raftpace.LimitExceeded)
        self.assertAlmostEqual(cm.exception.remaining, 30.0, delta=0.5)
        with self.assertRaises(raftpace.Paused):
            self.client.wait("k", timeout=0.2)
        with self.assertRaises(raftpace.InvalidRequest) as cm2:
            self.client.pause("k", 0)
        self.assertEqual(cm2.exception.field, "seconds")

    def test_wait_paces(self):
        self.agent.set_limit("k", 20, 1)
        t0 = time.monotonic()
        for _ in range(5):
            self.client.wait("k", timeout=2)
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)

    def test_wait_timeout_raises_at_once(self):
        self.agent.set_limit("k", 0.5, 1)
        self.client.wait("k", timeout=0)
        t0 = time.monotonic()
        with self.assertRaises(raftpace.LimitExceeded):
            self.client.wait("k", timeout=0.5)
        self.assertLess(time.monotonic() - t0, 0.3)
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)

    def test_wait_unbounded_steps(self):
        self.agent.set_limit("k", 10, 1)
        with mock.patch("raftpace.client.UNBOUNDED_STEP", 0.05):
            t0 = time.monotonic()
            for _ in range(4):
                self.client.wait("k", timeout=None)
        self.assertGreaterEqual(time.monotonic() - t0, 0.29)

    def test_wait_retries_unavailable(self):
        self.agent.set_limit("k", 100, 1)
        for code in ("no_leader", "overloaded"):
            self.agent.fail_next.append(("/v1/reserve/", 503, {"error": code, "code": code}, {"Retry-After": "0.05"}))
        self.client.wait("k", timeout=2)
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 3)
        self.agent.fail_next.append(("/v1/reserve/", 503, {"error": "x", "code": "stopped"}, {"Retry-After": "1"}))
        with self.assertRaises(raftpace.Unavailable) as cm:
            self.client.wait("k", timeout=0.3)
        self.assertEqual(cm.exception.code, "stopped")

    def test_wait_sleeps_to_a_quota_reset(self):
        # A spent quota is never reserved ahead: wait sleeps the whole wait
        # the agent names (to the window's reset), once, and asks again;
        # a reset past the timeout raises at once.
        self.agent.set_limit("k", 100, 1)
        spent = {"error": "spent", "code": "quota_exhausted", "key": "k", "wait": 0.3, "reset": "2026-12-07T00:00:00Z"}
        self.agent.fail_next.append(("/v1/reserve/", 429, spent, {"Retry-After": "1"}))
        t0 = time.monotonic()
        self.client.wait("k", timeout=5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.29)
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 2)
        self.agent.fail_next.append(("/v1/reserve/", 429, dict(spent, wait=30.0), {"Retry-After": "30"}))
        t0 = time.monotonic()
        with self.assertRaises(raftpace.QuotaExhausted) as cm:
            self.client.wait("k", timeout=2)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual((cm.exception.key, cm.exception.reset), ("k", "2026-12-07T00:00:00Z"))

    def test_limit_and_limited(self):
        self.agent.set_limit("k", 1, 1)
        with self.client.limit("k", wait_timeout=0.1):
            pass
        ran = []

        @self.client.limited("k", wait_timeout=0.1)
        def f(x):
            """doc"""
            ran.append(x)
            return x * 2

        self.assertEqual(f.__doc__, "doc")
        with self.assertRaises(raftpace.LimitExceeded):
            f(1)
        with self.assertRaises(raftpace.LimitExceeded):
            with self.client.limit("k", wait_timeout=0.1):
                ran.append("block")
        self.assertEqual(ran, [])
        self.agent.set_limit("j", 100, 1)
        self.assertEqual(self.client.limited("j")(lambda x: x * 2)(3), 6)

    def test_slots(self):
        self.agent.set_cap("global", 2)
        self.agent.set_cap("team:42", 1)
        with self.client.slot(["global", "team:42"], ttl=30) as s:
            self.assertTrue(s.id.startswith("s-"))
            self.assertAlmostEqual(s.deadline - time.monotonic(), 30, delta=0.5)
            with self.assertRaises(raftpace.ConcurrencyLimit) as cm:
                with self.client.slot(["global", "team:42"]):
                    pass
            self.assertEqual(cm.exception.full, ["team:42"])
            with self.client.slot("global"):
                pass
        self.assertEqual(self.agent.slots, {})
        with self.assertRaises(RuntimeError):
            with self.client.slot("team:42"):
                raise RuntimeError("boom")
        self.assertEqual(self.agent.slots, {})
        self.assertEqual(self.agent.count("DELETE", "/v1/slots/"), 3)

    def test_slot_waits_for_room(self):
        self.agent.set_cap("c", 1)
        s = self.client.acquire_slot("c", ttl=30)
        threading.Timer(0.1, s.release).start()
        t0 = time.monotonic()
        with self.client.slot("c", max_wait=2):
            self.assertGreaterEqual(time.monotonic() - t0, 0.08)

    def test_slot_release_failure_does_not_raise(self):
        self.agent.set_cap("c", 1)
        with self.assertLogs("raftpace", "WARNING"):
            with self.client.slot("c") as s:
                self.agent.fail_next.append(("/v1/slots/", 503, {"error": "x", "code": "closed"}, {}))
        self.assertTrue(s.released)

    def test_unknown_slot_is_fine(self):
        slot = raftpace.Slot(self.client, "s-gone-1", ["c"], 0.0)
        slot.release()
        slot.release()
        self.assertEqual(self.agent.count("DELETE", "/v1/slots/"), 1)


class ErrorsTest(AgentCase):
    def fail(self, status, body, headers=None):
        self.agent.fail_next.append(("/v1/", status, body, headers or {}))

    def test_every_code(self):
        self.agent.set_limit("k", 100, 1)
        cases = [
            (429, {"code": "limit_exceeded", "error": "m1", "wait": 1.5}, raftpace.LimitExceeded, {"wait": 1.5}),
            (429, {"code": "paused", "error": "m2", "remaining": 12.0}, raftpace.Paused, {"remaining": 12.0}),
            (429, {"code": "concurrency_limit", "error": "m3", "full": ["a"]}, raftpace.ConcurrencyLimit,
             {"full": ["a"]}),
            (404, {"code": "unknown_key", "error": "m4"}, raftpace.UnknownKey, {}),
            (404, {"code": "unknown_slot", "error": "m5"}, raftpace.UnknownSlot, {}),
            (400, {"code": "invalid", "error": "m6", "field": "n"}, raftpace.InvalidRequest, {"field": "n"}),
            (401, {"code": "unauthorized", "error": "m7"}, raftpace.Unauthorized, {}),
            (503, {"code": "closed", "error": "m8"}, raftpace.Unavailable, {"retry_after": 2.0}),
            (405, {"code": "method_not_allowed", "error": "m9"}, raftpace.Error, {}),
        ]
        for code in ("no_leader", "stopped", "overloaded"):
            cases.append((503, {"code": code, "error": code}, raftpace.Unavailable, {"retry_after": 2.0}))
        for status, body, cls, attrs in cases:
            with self.subTest(code=body["code"]):
                self.fail(status, body, {"Retry-After": "2"})
                with self.assertRaises(cls) as cm:
                    self.client.reserve_grant("k")
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertEqual(e.code, body["code"])
                self.assertEqual(e.message, body["error"])
                self.assertEqual(e.status, status)
                for a, v in attrs.items():
                    self.assertEqual(getattr(e, a), v)

    def test_real_paths(self):
        with self.assertRaises(raftpace.UnknownKey):
            self.client.reserve("nokey")
        with self.assertRaises(raftpace.UnknownKey):
            self.client.get_limit("nokey")
        self.agent.set_limit("k", 100, 2)
        with self.assertRaises(raftpace.InvalidRequest) as cm:
            self.client.reserve("k", n=3)
        self.assertEqual(cm.exception.field, "n")
        with self.assertRaises(raftpace.UnknownKey):
            self.client.acquire_slot(["nocap"])

    def test_non_json_5xx(self):
        self.fail(502, None)
        with self.assertRaises(raftpace.Unavailable):
            self.client.paused_for("k")

    def test_unreachable(self):
        c = raftpace.Client(socket=self.agent.socket_path + ".missing")
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve("k")
        self.assertEqual(cm.exception.code, "unreachable")


class TCPTest(AgentCase):
    tcp = True
    token = "sekrit"

    def test_token(self):
        self.agent.set_limit("k", 100, 1)
        self.assertEqual(self.client.reserve("k"), 0.0)
        bad = raftpace.Client(url="http://" + self.agent.url, token="wrong")
        self.addCleanup(bad.close)
        with self.assertRaises(raftpace.Unauthorized) as cm:
            bad.reserve("k")
        self.assertEqual(cm.exception.code, "unauthorized")
        with mock.patch.dict(os.environ, {"RAFTPACE_TOKEN": ""}, clear=False):
            none = raftpace.Client(url=self.agent.url)
        self.addCleanup(none.close)
        with self.assertRaises(raftpace.Unauthorized):
            none.get_limit("k")


class TimingTest(AgentCase):
    grace = 0.05  # the agent's default: a 150 ms answer is past it
    def test_slow_answer_is_forfeited(self):
        # The agent answers with a 50 ms grace, then the answer takes 150 ms
        # to arrive: sent + held + use_by is past before the caller can go.
        self.agent.set_limit("k", 1000, 1)
        slow = [0.15]
        self.agent.slow_answer = lambda m, p: slow.pop() if slow and p.startswith("/v1/reserve/") else 0.0
        d = self.client.reserve("k")
        # (on a loaded machine a later grant may be late too: each is forfeited)
        self.assertGreaterEqual(len(self.agent.forfeits), 1)
        self.assertEqual(set(self.agent.forfeits), {("k", 1)})
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 1 + len(self.agent.forfeits))
        self.assertLess(d, 0.01)

    def test_slow_answer_in_wait(self):
        self.agent.set_limit("k", 1000, 1)
        slow = [0.15]
        self.agent.slow_answer = lambda m, p: slow.pop() if slow and p.startswith("/v1/reserve/") else 0.0
        self.client.wait("k", timeout=2)
        self.assertGreaterEqual(len(self.agent.forfeits), 1)
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 1 + len(self.agent.forfeits))

    def test_stopped_past_use_by_forfeits(self):
        # The grant waits 100 ms; the caller "is stopped" (a GC pause) for
        # 200 ms more while it sleeps: past use_by it must forfeit and ask again.
        self.agent.set_limit("k", 10, 1)
        self.client.reserve("k")
        stops = [0.2]

        def sleep(d):
            time.sleep(d + (stops.pop() if stops else 0.0))

        self.client._sleep = sleep
        self.client.wait("k", timeout=3)
        self.assertGreaterEqual(len(self.agent.forfeits), 1)
        self.assertEqual(set(self.agent.forfeits), {("k", 1)})
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 2 + len(self.agent.forfeits))

    def test_never_usable(self):
        self.agent.set_limit("k", 1000, 1)
        self.agent.slow_answer = lambda m, p: 0.06 if p.startswith("/v1/reserve/") else 0.0
        with self.assertRaises(raftpace.Unavailable) as cm:
            self.client.reserve("k")
        self.assertEqual(cm.exception.code, "late")
        self.assertEqual(len(self.agent.forfeits), raftpace.client.MAX_LATE)

    def test_go_no_earlier(self):
        self.agent.set_limit("k", 5, 1)
        self.client.reserve("k")
        t0 = time.monotonic()
        self.client.wait("k", timeout=1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.17)


class ConnectionTest(AgentCase):
    def test_keepalive_reused(self):
        self.agent.set_limit("k", 1000, 10)
        for _ in range(5):
            self.client.reserve("k")
        self.assertEqual(len({r[0] for r in self.agent.requests}), 1)
        self.assertEqual(self.client._pool.idle_count(), 1)

    def test_idle_close_is_retried(self):
        self.agent.set_limit("k", 1000, 10)
        self.agent.close_idle = True
        for _ in range(4):
            self.client.reserve("k")
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 4)

    def test_dropped_on_fresh_connection_not_retried(self):
        self.agent.set_limit("k", 1000, 10)
        self.agent.drop_next = 1
        with self.assertRaises(raftpace.Unavailable) as cm:
            self.client.reserve("k")
        self.assertEqual(cm.exception.code, "unreachable")
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 1)

    def test_dropped_on_reused_connection(self):
        self.agent.set_limit("k", 1000, 10)
        self.agent.set_cap("c", 5)
        self.client.reserve("k")
        self.agent.drop_next = 1  # reached the agent, no answer: a reserve is repeated (safe)
        self.client.reserve("k")
        self.assertEqual(self.agent.count("POST", "/v1/reserve/"), 3)
        self.client.get_limit("k")
        self.agent.drop_next = 1  # ... taking slots is not (a phantom slot would hold the cap)
        with self.assertRaises(raftpace.Unavailable):
            self.client.acquire_slot("c")
        self.assertEqual(self.agent.count("POST", "/v1/slots"), 1)

    def test_threads(self):
        self.agent.set_limit("k", 100000, 1000)
        errors = []
        n_threads, per = 16, 25

        def work():
            try:
                for _ in range(per):
                    self.client.wait("k", timeout=5)
                    self.client.paused_for("k")
            except Exception as e:  # pragma: no cover
                errors.append(e)

        ts = [threading.Thread(target=work) for _ in range(n_threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        # a grant that came back too late is forfeited and asked for again
        self.assertEqual(len(self.agent.grants), n_threads * per + len(self.agent.forfeits))
        self.assertLessEqual(len({r[0] for r in self.agent.requests}), n_threads)
        self.assertLessEqual(self.client._pool.idle_count(), n_threads)

    @unittest.skipUnless(hasattr(os, "fork"), "os.fork is not available")
    def test_fork(self):
        self.agent.set_limit("parent", 1000, 10)
        self.agent.set_limit("child", 1000, 10)
        self.client.reserve("parent")
        self.assertEqual(self.client._pool.idle_count(), 1)
        parent_conn = self.client._pool._idle[0]
        r, w = os.pipe()
        with warnings.catch_warnings():
            # 3.12+: the fake agent's threads make this process multi-threaded;
            # the child only uses the client, which re-creates its lock after fork
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: never return into unittest
            code = 1
            try:
                os.close(r)
                empty = self.client._pool._idle == []  # dropped by register_at_fork
                closed = parent_conn.sock is None
                for _ in range(3):
                    self.client.reserve("child")
                ok = empty and closed and self.client._pool.idle_count() == 1
                os.write(w, b"ok" if ok else ("empty=%s closed=%s" % (empty, closed)).encode())
                code = 0
            except BaseException as e:
                os.write(w, repr(e).encode()[:200])
            finally:
                os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        msg = os.read(r, 1000)
        os.close(r)
        self.assertEqual(msg, b"ok")
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        # the parent's connection still works after the child closed its copy
        self.client.reserve("parent")
        self.assertIs(self.client._pool._idle[0], parent_conn)
        by_conn = {}
        for conn_id, peer, _, path, _ in self.agent.requests:
            by_conn.setdefault(conn_id, set()).add((peer, path.rsplit("/", 1)[-1]))
        for conn_id, seen in by_conn.items():
            keys = {k for _, k in seen}
            self.assertEqual(len(keys), 1, "connection %d carried %s" % (conn_id, keys))
            if hasattr(os, "getpid") and None not in {p for p, _ in seen}:
                peers = {p for p, _ in seen}
                self.assertEqual(peers, {os.getpid() if keys == {"parent"} else pid})
        child_forfeits = sum(1 for k, _ in self.agent.forfeits if k == "child")
        self.assertEqual(self.agent.count("POST", "/v1/reserve/child"), 3 + child_forfeits)

    def test_pid_check_without_hook(self):
        # A pool reached after a fork without register_at_fork still drops
        # the inherited connections on its PID check.
        self.agent.set_limit("k", 1000, 10)
        self.client.reserve("k")
        with mock.patch("os.getpid", return_value=os.getpid() + 100000):
            self.assertEqual(self.client._pool.idle_count(), 0)
        self.assertEqual(self.client._pool._pid, os.getpid() + 100000)


if __name__ == "__main__":
    unittest.main()
