"""The client against the REAL agent: set RAFTPACE_BINARY to the raftpace
binary (``go build -o /tmp/raftpace ./cmd/raftpace``).

Skipped only when RAFTPACE_BINARY is unset. When it is set, an agent that
does not start (or does not serve its --socket) FAILS these tests.
"""

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import raftpace

BINARY = os.environ.get("RAFTPACE_BINARY", "")
START_TIMEOUT = float(os.environ.get("RAFTPACE_START_TIMEOUT", "30"))


@unittest.skipUnless(BINARY, "RAFTPACE_BINARY is unset: set it to a raftpace binary to test against the real agent")
class RealAgentTest(unittest.TestCase):
    proc = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="rp-py-agent-")
        cls.sock = os.path.join(cls.tmp, "s.sock")
        cls.ready = os.path.join(cls.tmp, "ready.json")
        cls.log_path = os.path.join(cls.tmp, "agent.log")
        cls.log = open(cls.log_path, "wb")
        args = [BINARY, "agent", "--node-id", "a", "--bootstrap-expect", "1",
                "--data-dir", os.path.join(cls.tmp, "data"), "--socket", cls.sock,
                "--http", "127.0.0.1:0", "--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0",
                "--raft-timing", "fast", "--ready-file", cls.ready, "--leave-on-terminate=false"]
        try:
            cls.proc = subprocess.Popen(args, stdout=cls.log, stderr=subprocess.STDOUT)
        except OSError as e:
            cls._cleanup()
            raise AssertionError("RAFTPACE_BINARY=%s does not run: %s" % (BINARY, e))
        try:
            cls.http = cls._wait_ready()
        except BaseException:
            cls._cleanup()
            raise
        cls.client = raftpace.Client(socket=cls.sock, timeout=10)

    @classmethod
    def _agent_log(cls):
        try:
            with open(cls.log_path, "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    @classmethod
    def _wait_ready(cls):
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            if cls.proc.poll() is not None:
                raise AssertionError("the agent exited with %s before it was ready:\n%s"
                                     % (cls.proc.returncode, cls._agent_log()))
            if os.path.exists(cls.ready) and os.path.exists(cls.sock):
                with open(cls.ready) as f:
                    try:
                        doc = json.load(f)
                    except ValueError:
                        doc = None
                # The ready file says the agent listens; /readyz that its
                # node has a leader and holds its share (before that a
                # reservation is a retryable 503 no_leader).
                if doc and doc.get("http_addr") and cls._agent_ready(doc["http_addr"]):
                    return doc["http_addr"]
            time.sleep(0.1)
        raise AssertionError("the agent was not ready (ready file with http_addr and socket %s) within %gs:\n%s"
                             % (cls.sock, START_TIMEOUT, cls._agent_log()))

    @staticmethod
    def _agent_ready(addr):
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

    @classmethod
    def _cleanup(cls):
        if cls.proc is not None and cls.proc.poll() is None:
            cls.proc.terminate()
            try:
                cls.proc.wait(10)
            except subprocess.TimeoutExpired:
                cls.proc.kill()
                cls.proc.wait()
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls._cleanup()

    def cli(self, *args):
        env = dict(os.environ)
        env.pop("RAFTPACE_TOKEN", None)
        r = subprocess.run([BINARY] + list(args) + ["--addr", self.http], capture_output=True, text=True,
                           timeout=30, env=env)
        self.assertEqual(r.returncode, 0, "raftpace %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def set_limit(self, key, rate, burst):
        self.cli("limit", "set", key, "--rate", str(rate), "--burst", str(burst))
        end = time.monotonic() + 10
        while True:  # the agent beside us may learn of it a little later
            try:
                return self.client.get_limit(key)
            except raftpace.UnknownKey:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)

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
