"""The client against the REAL agent: set RAFTPACE_BINARY to the raftpace
binary (``go build -o /tmp/raftpace ./cmd/raftpace``).

Skipped only when RAFTPACE_BINARY is unset. When it is set, an agent that
does not start (or does not serve its --socket) FAILS these tests.
"""

import os
import threading
import time
import unittest

import raftpace
from raftpace.testing import Agent

BINARY = os.environ.get("RAFTPACE_BINARY", "")


@unittest.skipUnless(BINARY, "RAFTPACE_BINARY is unset: set it to a raftpace binary to test against the real agent")
class RealAgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(BINARY).start()
        cls.client = raftpace.Client(socket=cls.agent.socket, timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.agent.stop()

    def cli(self, *args):
        return self.agent.cli(*args)

    def set_limit(self, key, rate, burst):
        return self.agent.set_limit(key, rate, burst)

    def test_limit_and_reserve(self):
        self.assertEqual(self.set_limit("py/limit-é", 10, 2), (10.0, 2))
        self.assertEqual(self.client.reserve("py/limit-é", max_wait=1), 0.0)
        g = self.client.reserve_grant("py/limit-é", max_wait=1)
        self.assertGreaterEqual(g.use_by, g.go_at)
        with self.assertRaises(raftpace.LimitExceeded):
            self.client.reserve("py/limit-é", n=2, max_wait=0)
        with self.assertRaises(raftpace.InvalidRequest) as cm:
            self.client.reserve("py/limit-é", n=3)
        self.assertEqual(cm.exception.field, "n")

    def test_several_keys_one_event(self):
        self.set_limit("py-all-tenant", 10, 1)
        self.set_limit("py-all-global", 2, 1)
        both = ["py-all-tenant", ("py-all-global", 1)]
        self.assertEqual(self.client.reserve_all(both, max_wait=1), 0.0)
        with self.assertRaises(raftpace.LimitExceeded) as cm:
            self.client.reserve_all(both, max_wait=0)
        self.assertEqual(cm.exception.key, "py-all-global")
        self.assertGreater(cm.exception.wait, 0.3)
        # The refusal consumed nothing of the tenant: its next slot is 0.1 s
        # after the grant, not after global's.
        self.assertLessEqual(self.client.reserve("py-all-tenant", max_wait=1), 0.15)
        t0 = time.monotonic()
        self.client.wait_all(both, timeout=5)
        self.assertGreater(time.monotonic() - t0, 0.2)  # global's next slot
        with self.assertRaises(raftpace.UnknownKey):
            self.client.reserve_all(["py-all-tenant", "py-no-such-key"], max_wait=1)
        with self.assertRaises(raftpace.InvalidRequest) as cm:
            self.client.reserve_all(["py-all-tenant", "py-all-tenant"])
        self.assertEqual(cm.exception.field, "keys")

    def test_quota(self):
        self.agent.set_limit("py-quota", 100, 3, quota="3/day")
        r = self.client.remaining("py-quota")
        self.assertEqual((r["quota"], r["left"], r["used"], r["tokens"]), ("3/day", 3, 0, 3))
        self.assertEqual(self.client.reserve("py-quota", 3, max_wait=1), 0.0)
        with self.assertRaises(raftpace.QuotaExhausted) as cm:
            self.client.reserve("py-quota", max_wait=600)
        e = cm.exception
        self.assertIsInstance(e, raftpace.LimitExceeded)
        self.assertEqual((e.code, e.key), ("quota_exhausted", "py-quota"))
        self.assertTrue(e.reset.endswith("T00:00:00Z"), e.reset)  # the next day
        self.assertGreater(e.wait, 0)
        with self.assertRaises(raftpace.QuotaExhausted):  # a wait shorter than the reset
            self.client.wait("py-quota", timeout=1)
        self.assertEqual(self.client.remaining("py-quota")["left"], 0)
        self.set_limit("py-quota-none", 10, 2)
        r = self.client.remaining("py-quota-none")
        self.assertNotIn("quota", r)
        self.assertEqual(r["burst"], 2)

    def test_unknown_key(self):
        with self.assertRaises(raftpace.UnknownKey):
            self.client.reserve("py-no-such-key")
        with self.assertRaises(raftpace.UnknownKey):
            self.client.get_limit("py-no-such-key")

    def test_wait_holds_the_rate(self):
        rate, burst = 20, 2
        self.set_limit("py-rate", rate, burst)
        times = []
        lock = threading.Lock()

        def work():
            for _ in range(10):
                self.client.wait("py-rate", timeout=10)
                with lock:
                    times.append(time.monotonic())

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        times.sort()
        self.assertEqual(len(times), 40)
        # the ceiling R*W + B (+ R*delta: allow 1 for the grace) in every window
        w = 0.5
        for i, t0 in enumerate(times):
            n = sum(1 for t in times[i:] if t - t0 <= w)
            self.assertLessEqual(n, rate * w + burst + 1)
        self.assertGreaterEqual(times[-1] - times[0], (40 - burst) / rate * 0.9)

    def test_pause(self):
        self.set_limit("py-pause", 100, 1)
        self.assertEqual(self.client.paused_for("py-pause"), 0.0)
        self.assertAlmostEqual(self.client.pause("py-pause", 20), 20, delta=1)
        self.assertAlmostEqual(self.client.paused_for("py-pause"), 20, delta=1)
        with self.assertRaises(raftpace.Paused) as cm:
            self.client.wait("py-pause", timeout=0.5)
        self.assertGreater(cm.exception.remaining, 15)

    def test_slots(self):
        self.cli("slots", "set", "py-cap", "--max", "1")
        end = time.monotonic() + 10
        while True:
            try:
                s = self.client.acquire_slot("py-cap", ttl=30)
                break
            except raftpace.UnknownKey:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        with s:
            self.assertGreater(s.remaining(), 25)
            with self.assertRaises(raftpace.ConcurrencyLimit) as cm:
                with self.client.slot("py-cap"):
                    pass
            self.assertEqual(cm.exception.full, ["py-cap"])
        with self.client.slot(["py-cap"], max_wait=1):
            pass

    def test_fork(self):
        self.set_limit("py-fork", 1000, 10)
        self.client.reserve("py-fork")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self.client.reserve("py-fork")
                code = 0 if self.client._pool.idle_count() == 1 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.client.reserve("py-fork")


if __name__ == "__main__":
    unittest.main()
