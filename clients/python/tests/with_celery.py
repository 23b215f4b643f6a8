"""raftpace.celery with a REAL Celery worker, Redis and agent.

Run with Debian's python (python3-celery, python3-redis) from
clients/python:

    RAFTPACE_BINARY=/tmp/raftpace /usr/bin/python3 -m unittest -v tests.with_celery

Starts its own redis-server (a free loopback port, a temporary directory),
the agent named by RAFTPACE_BINARY, a fake provider (http.server: 429 with
Retry-After: 2 on its first call, 200 after) and a worker
(``celery -A tests.celery_app worker --pool=prefork --concurrency=2``),
enqueues 30 tasks on a key limited at 5/s burst 1 paced with
``raftpace.celery.paced(max_block=0.1)``, and checks that

(a) admissions that would block past max_block are retried with a
    countdown, and no attempt held its child much longer than max_block;
(b) the bodies' start times respect the ceiling R*W + B + R*delta in every
    window W;
(c) every task completes;
(d) the provider's 429 became a fleet-wide pause no body started during.

Skipped only when celery cannot be imported and RAFTPACE_REQUIRE_CELERY is
unset (RAFTPACE_REQUIRE_CELERY=1 makes that a failure); RAFTPACE_BINARY
unset is a skip too (a failure under RAFTPACE_REQUIRE_CELERY=1).
"""

import http.server
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import celery  # noqa: F401
    import redis  # noqa: F401  (Celery's redis transport)
    HAVE_CELERY = True
except ImportError:
    HAVE_CELERY = False

REQUIRE = os.environ.get("RAFTPACE_REQUIRE_CELERY", "") not in ("", "0")
BINARY = os.environ.get("RAFTPACE_BINARY", "")
HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # clients/python: holds raftpace/ and tests/

KEY = "celery-acme"
RATE, BURST = 5.0, 1
GRACE = 0.05  # the agent's --use-grace (its default), delta of the ceiling
MAX_BLOCK = 0.1  # the integration's threshold
BLOCK_SLACK = 1.0  # round trips and scheduling on a loaded machine, on top of MAX_BLOCK
# (a child sleeping for its grant would hold it for the whole backlog: up to ~6 s here)
N_TASKS = 30
PROVIDER_PAUSE = 2.0  # the provider's Retry-After
RESULT_TIMEOUT = 90.0


def _free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class _Provider(http.server.BaseHTTPRequestHandler):
    lock = threading.Lock()
    calls = []  # (monotonic, status)

    def do_GET(self):
        with self.lock:
            first = not self.calls
            status = 429 if first else 200
            self.calls.append((time.monotonic(), status))
        body = b'{"ok": false}' if status == 429 else b'{"ok": true}'
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "%d" % PROVIDER_PAUSE)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def _stop(proc, timeout=15.0, sig=signal.SIGTERM):
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)  # its own session: the worker's children too
    except OSError:
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.wait()


def _tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""


class CeleryRealWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not HAVE_CELERY:
            if REQUIRE:
                raise AssertionError("RAFTPACE_REQUIRE_CELERY is set but %s cannot import celery and redis "
                                     "(Debian: apt-get install python3-celery python3-redis)" % sys.executable)
            raise unittest.SkipTest("celery is not importable (set RAFTPACE_REQUIRE_CELERY=1 to fail instead)")
        if not BINARY:
            if REQUIRE:
                raise AssertionError("RAFTPACE_REQUIRE_CELERY is set but RAFTPACE_BINARY is not")
            raise unittest.SkipTest("RAFTPACE_BINARY is unset")
        cls.procs = []
        cls.tmp = tempfile.mkdtemp(prefix="rp-py-celery-")
        cls.httpd = None
        cls.agent = None
        try:
            cls._start_redis()
            cls._start_agent()
            cls._start_provider()
        except BaseException:
            cls._cleanup()
            raise

    # -- processes --------------------------------------------------------

    @classmethod
    def _spawn(cls, name, args, env=None, cwd=None):
        log = open(os.path.join(cls.tmp, name + ".log"), "wb")
        try:
            p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                 start_new_session=True)
        except OSError as e:
            raise AssertionError("%s does not run: %s" % (args[0], e))
        finally:
            log.close()
        cls.procs.append(p)
        return p

    @classmethod
    def _start_redis(cls):
        exe = shutil.which("redis-server")
        if not exe:
            raise AssertionError("redis-server is not installed (Debian: apt-get install redis-server)")
        rdir = os.path.join(cls.tmp, "redis")
        os.mkdir(rdir)
        for _ in range(5):
            port = _free_port()
            p = cls._spawn("redis", [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
                                     "--save", "", "--appendonly", "no", "--daemonize", "no",
                                     "--protected-mode", "yes"], cwd=rdir)
            end = time.monotonic() + 20
            while time.monotonic() < end and p.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(64).startswith(b"+PONG"):
                            cls.redis_url = "redis://127.0.0.1:%d/0" % port
                            cls.redis_proc = p
                            return
                except OSError:
                    pass
                time.sleep(0.1)
            _stop(p)  # the port was taken meanwhile, or it did not start: another port
        raise AssertionError("redis-server did not start:\n" + _tail(os.path.join(cls.tmp, "redis.log")))

    @classmethod
    def _start_agent(cls):
        sys.path.insert(0, PKG_ROOT)
        import raftpace
        from raftpace.testing import Agent
        cls.agent = Agent(BINARY, extra_args=["--use-grace", "%dms" % int(GRACE * 1000)],
                          tmp=os.path.join(cls.tmp, "agent")).start()
        cls.sock, cls.http = cls.agent.socket, cls.agent.http
        cls.agent.set_limit(KEY, RATE, BURST)
        cls.client = raftpace.Client(socket=cls.sock, timeout=10)

    @classmethod
    def _start_provider(cls):
        _Provider.calls = []
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.provider_url = "http://127.0.0.1:%d" % cls.httpd.server_address[1]

    @classmethod
    def _cleanup(cls):
        for p in reversed(cls.procs):
            _stop(p)
        if cls.agent is not None:
            cls.agent.stop()
        if cls.httpd is not None:
            cls.httpd.shutdown()
            cls.httpd.server_close()
        if os.environ.get("RP_KEEP_TMP"):
            print("kept %s" % cls.tmp, file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._cleanup()

    # -- the test ---------------------------------------------------------

    def _events(self):
        out = []
        try:
            with open(self.events_path) as f:
                for line in f:
                    if line.strip():
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
        return out

    def _diag(self):
        return "\nworker log:\n%s\nagent log:\n%s" % (_tail(os.path.join(self.tmp, "worker.log")),
                                                     self.agent.log_tail(1500))

    def test_real_worker(self):
        self.events_path = os.path.join(self.tmp, "events.jsonl")
        env = dict(os.environ)
        env.update(RP_CELERY_BROKER=self.redis_url, RP_AGENT_SOCKET=self.sock, RP_KEY=KEY,
                   RP_MAX_BLOCK=str(MAX_BLOCK), RP_PROVIDER_URL=self.provider_url, RP_EVENTS=self.events_path,
                   PYTHONPATH=PKG_ROOT + os.pathsep + env.get("PYTHONPATH", ""))
        env.pop("RAFTPACE_SOCKET", None)
        worker = self._spawn("worker", [sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker",
                                        "--pool=prefork", "--concurrency=2", "--loglevel=INFO",
                                        "--without-gossip", "--without-mingle", "--without-heartbeat",
                                        "-n", "rp-test@%h"], env=env, cwd=PKG_ROOT)

        os.environ.update(RP_CELERY_BROKER=self.redis_url, RP_KEY=KEY, RP_MAX_BLOCK=str(MAX_BLOCK))
        sys.path.insert(0, PKG_ROOT)
        from tests import celery_app
        app = celery_app.app
        app.conf.broker_url = self.redis_url
        app.conf.result_backend = self.redis_url

        # Wait for the worker so the clock of the run starts with it.
        end = time.monotonic() + 60
        while True:
            if worker.poll() is not None:
                self.fail("the celery worker exited with %s%s" % (worker.returncode, self._diag()))
            try:
                if app.control.ping(timeout=1.0):
                    break
            except Exception:
                pass
            if time.monotonic() > end:
                self.fail("the celery worker did not answer a ping within 60 s" + self._diag())

        t_start = time.monotonic()
        results = [celery_app.call_provider.delay(i) for i in range(N_TASKS)]
        t_enqueued = time.monotonic()
        deadline = t_enqueued + RESULT_TIMEOUT
        pending = list(results)
        while pending:  # polls the backend (AsyncResult.get subscribes one by one: slow)
            pending = [r for r in pending if not r.ready()]
            if pending and time.monotonic() > deadline:
                self.fail("%d tasks did not complete within %gs%s" % (len(pending), RESULT_TIMEOUT, self._diag()))
            if worker.poll() is not None:
                self.fail("the celery worker exited with %s%s" % (worker.returncode, self._diag()))
            time.sleep(0.1)
        done = []
        for r in results:
            if not r.successful():
                self.fail("task %s failed: %r%s" % (r.id, r.result, self._diag()))
            done.append(r.result)
        elapsed = time.monotonic() - t_start
        del results, r  # drop the results' subscriptions while Redis is still up
        import gc
        gc.collect()
        app.close()

        # (c) all tasks completed
        self.assertEqual(sorted(done), list(range(N_TASKS)))

        events = self._events()
        attempts = [e for e in events if e["kind"] == "attempt"]
        pauses = [e for e in events if e["kind"] == "pause"]
        ok = [a for a in attempts if a["outcome"] == "ok"]
        retries = [a for a in attempts if a["outcome"] == "retry"]
        errors = [a for a in attempts if a["outcome"] == "error"]
        self.assertEqual(errors, [], "attempts ended in errors")
        self.assertEqual(sorted(a["i"] for a in ok), list(range(N_TASKS)), "one successful body per task")
        reasons = {}
        for a in retries:
            reasons[a["reason"]] = reasons.get(a["reason"], 0) + 1
        blocks = sorted(((a["body"] if a["body"] is not None else a["end"]) - a["start"]) for a in attempts
                        if a["outcome"] == "ok" or a["body"] is None)
        print("\ncelery: %d tasks enqueued in %.2fs, done in %.2fs, %d attempts, %d retries %r, admission block p50 %.3fs max %.3fs"
              % (N_TASKS, t_enqueued - t_start, elapsed, len(attempts), len(retries), reasons, blocks[len(blocks) // 2], blocks[-1]),
              file=sys.stderr)

        # (a) waits past max_block were retried with a countdown, not slept
        # in the child: there were such retries, and no attempt's admission
        # held its child much longer than max_block.
        self.assertGreater(reasons.get("LimitExceeded", 0), 0,
                           "no admission was refused for waiting past max_block: %r" % reasons)
        self.assertLessEqual(blocks[-1], MAX_BLOCK + BLOCK_SLACK,
                             "an admission held a worker child %.3fs (max_block %.3fs)" % (blocks[-1], MAX_BLOCK))

        # (b) executions (bodies started) within R*W + B + R*delta in every window W
        bodies = sorted(a["body"] for a in attempts if a["body"] is not None)
        self.assertEqual(len(bodies), N_TASKS + 1, "30 bodies plus the one the provider answered 429")
        for w in (0.2, 0.5, 1.0, 2.0, 3.0, 5.0):
            bound = math.floor(RATE * w + BURST + RATE * GRACE + 1e-9)
            j = 0
            worst = 0
            for i in range(len(bodies)):
                if j < i:
                    j = i
                while j + 1 < len(bodies) and bodies[j + 1] - bodies[i] <= w:
                    j += 1
                worst = max(worst, j - i + 1)
            self.assertLessEqual(worst, bound, "%d bodies in a window of %.1fs (ceiling %d)" % (worst, w, bound))

        # (d) the provider's 429 became a pause that no body started during
        calls = list(_Provider.calls)
        self.assertEqual(calls[0][1], 429)
        self.assertEqual(len(calls), N_TASKS + 1)
        self.assertEqual(len(pauses), 1, "one pause asked for: %r" % pauses)
        p = pauses[0]
        self.assertAlmostEqual(p["seconds"], PROVIDER_PAUSE, delta=0.01)
        lo, hi = p["done"] + 0.05, p["sent"] + PROVIDER_PAUSE - 0.01  # surely paused in [done, sent + 2]
        during = [b - p["done"] for b in bodies if lo <= b <= hi]
        self.assertEqual(during, [], "bodies started during the pause (s after it was set)")
        self.assertGreater(reasons.get("Paused", 0), 0, "no task was turned away by the pause: %r" % reasons)
        self.assertEqual(reasons.get("ProviderLimited", 0), 1, "the 429'd task was not retried: %r" % reasons)

        _stop(worker, timeout=20)


if __name__ == "__main__":
    unittest.main()
