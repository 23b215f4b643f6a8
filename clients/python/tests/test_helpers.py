import email.utils
import http.server
import importlib
import importlib.util
import sys
import threading
import time
import types
import unittest
import urllib.error
import urllib.request

import raftpace
from raftpace.retry_after import MAX_PAUSE, parse_retry_after, pause_for

from .fakeagent import FakeAgent


class RetryAfterTest(unittest.TestCase):
    def test_delta_seconds(self):
        self.assertEqual(parse_retry_after("120"), 120.0)
        self.assertEqual(parse_retry_after(" 1.5 "), 1.5)
        self.assertEqual(parse_retry_after("0"), 0.0)
        self.assertEqual(parse_retry_after("-3"), 0.0)
        self.assertEqual(parse_retry_after("999999"), MAX_PAUSE)
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after(""))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after("nan"))

    def test_http_date(self):
        now = 1_700_000_000.0
        self.assertAlmostEqual(parse_retry_after(email.utils.formatdate(now + 90, usegmt=True), now=now), 90.0)
        self.assertEqual(parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now=now), 0.0)
        self.assertEqual(parse_retry_after(email.utils.formatdate(now + 3 * 86400, usegmt=True), now=now),
                         MAX_PAUSE)
        self.assertAlmostEqual(parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", now=now), 60.0)

    def test_pause_for(self):
        class R(object):
            def __init__(self, status, headers):
                self.status_code, self.headers = status, headers

        self.assertEqual(pause_for(R(429, {"retry-after": "7"})), 7.0)
        self.assertEqual(pause_for(R(503, {"Retry-After": "7"})), 7.0)
        self.assertIsNone(pause_for(R(500, {"Retry-After": "7"})))
        self.assertIsNone(pause_for(R(429, {})))
        err = types.SimpleNamespace(response=R(429, {"Retry-After": "3"}))
        self.assertEqual(pause_for(err), 3.0)


class Provider(object):
    """A provider on TCP answering from a script of (status, headers)."""

    def __init__(self):
        self.script = []
        self.hits = []
        prov = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                prov.hits.append(time.monotonic())
                status, headers = prov.script.pop(0) if prov.script else (200, {})
                body = b"hello"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/x" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class AgentCase(unittest.TestCase):
    def setUp(self):
        self.agent = FakeAgent()
        self.addCleanup(self.agent.close)
        self.client = raftpace.Client(socket=self.agent.socket_path)
        self.addCleanup(self.client.close)
        self.agent.set_limit("acme", 1000, 5)


class UrlopenTest(AgentCase):
    def setUp(self):
        super().setUp()
        self.provider = Provider()
        self.addCleanup(self.provider.close)

    def test_ok(self):
        with self.client.urlopen("acme", self.provider.url, timeout=5) as r:
            self.assertEqual(r.read(), b"hello")
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)

    def test_429_pauses_fleet_and_raises(self):
        self.provider.script = [(429, {"Retry-After": "30"})]
        with self.assertRaises(urllib.error.HTTPError) as cm:
            self.client.urlopen("acme", urllib.request.Request(self.provider.url), timeout=5)
        cm.exception.close()
        self.assertEqual(cm.exception.code, 429)
        self.assertAlmostEqual(self.client.paused_for("acme"), 30, delta=1)
        with self.assertRaises(raftpace.Paused):  # the next call does not reach the provider
            self.client.urlopen("acme", self.provider.url, wait_timeout=0.1)
        self.assertEqual(len(self.provider.hits), 1)

    def test_503_http_date_returned(self):
        when = email.utils.formatdate(time.time() + 60, usegmt=True)
        self.provider.script = [(503, {"Retry-After": when})]
        r = self.client.urlopen("acme", self.provider.url, on_limited="return", timeout=5)
        r.close()
        self.assertEqual(r.code, 503)
        self.assertAlmostEqual(self.client.paused_for("acme"), 60, delta=2)

    def test_retries_through_the_pause(self):
        self.provider.script = [(429, {"Retry-After": "0.3"})]
        with self.client.urlopen("acme", self.provider.url, retries=1, wait_timeout=2, timeout=5) as r:
            self.assertEqual(r.status, 200)
        self.assertEqual(len(self.provider.hits), 2)
        self.assertGreaterEqual(self.provider.hits[1] - self.provider.hits[0], 0.25)

    def test_other_errors_untouched(self):
        self.provider.script = [(500, {"Retry-After": "30"}), (429, {})]
        for code in (500, 429):
            with self.assertRaises(urllib.error.HTTPError) as cm:
                self.client.urlopen("acme", self.provider.url, timeout=5)
            cm.exception.close()
            self.assertEqual(cm.exception.code, code)
        self.assertEqual(self.client.paused_for("acme"), 0.0)


class RequestsAdapterTest(AgentCase):
    """With a stand-in of requests.adapters (always), and with the real
    requests when it is installed."""

    @unittest.skipUnless(importlib.util.find_spec("requests"), "requests is not installed (the stand-in test covers "
                         "the adapter's logic)")
    def test_adapter_with_requests(self):
        import requests
        from raftpace.requests_adapter import PacedAdapter
        provider = Provider()
        self.addCleanup(provider.close)
        provider.script = [(200, {}), (429, {"Retry-After": "9"})]
        s = requests.Session()
        self.addCleanup(s.close)
        s.mount(provider.url.rsplit("/", 1)[0] + "/", PacedAdapter(self.client, "acme", wait_timeout=0.2))
        self.assertEqual(s.get(provider.url, timeout=5).text, "hello")
        self.assertEqual(s.get(provider.url, timeout=5).status_code, 429)
        self.assertAlmostEqual(self.client.paused_for("acme"), 9, delta=1)
        with self.assertRaises(raftpace.Paused):
            s.get(provider.url, timeout=5)
        self.assertEqual(len(provider.hits), 2)
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 2)

    def test_adapter_with_stand_in(self):
        sent = []

        class HTTPAdapter(object):
            def __init__(self, **kw):
                self.kw = kw

            def send(self, request, **kw):
                sent.append(request)
                return types.SimpleNamespace(status_code=429, headers={"Retry-After": "12"})

        mod = types.ModuleType("requests")
        adapters = types.ModuleType("requests.adapters")
        adapters.HTTPAdapter = HTTPAdapter
        mod.adapters = adapters
        saved = {k: sys.modules.get(k) for k in ("requests", "requests.adapters", "raftpace.requests_adapter")}
        sys.modules["requests"] = mod
        sys.modules["requests.adapters"] = adapters
        sys.modules.pop("raftpace.requests_adapter", None)
        try:
            ra = importlib.import_module("raftpace.requests_adapter")
            a = ra.PacedAdapter(self.client, "acme", wait_timeout=1, max_retries=3)
            self.assertEqual(a.kw, {"max_retries": 3})
            resp = a.send("REQ", timeout=5)
            self.assertEqual(resp.status_code, 429)
            self.assertEqual(sent, ["REQ"])
            self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)
            self.assertAlmostEqual(self.client.paused_for("acme"), 12, delta=1)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v

    def test_import_raftpace_imports_neither(self):
        import subprocess
        out = subprocess.run([sys.executable, "-c",
                              "import sys, raftpace, raftpace.celery; "
                              "print('requests' in sys.modules, 'celery' in sys.modules)"],
                             capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False False")


class Retry(Exception):
    pass


class FakeTask(object):
    """Celery's bound task, as far as paced uses it: retry() returns the
    exception to raise."""

    def __init__(self):
        self.retries = []

    def retry(self, countdown=None, exc=None, **kw):
        self.retries.append((countdown, exc))
        return Retry(countdown)


class CeleryTest(AgentCase):
    def test_runs_when_admitted(self):
        from raftpace.celery import paced

        @paced(self.client, lambda x: "acme", max_block=1.0)
        def task_fn(task, x):
            return x + 1

        t = FakeTask()
        self.assertEqual(task_fn(t, 1), 2)
        self.assertEqual(t.retries, [])
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)

    def test_retries_instead_of_blocking(self):
        from raftpace.celery import paced
        self.agent.set_limit("slow", 0.2, 1)
        ran = []

        @paced(lambda: self.client, "slow", max_block=0.5)
        def task_fn(task):
            ran.append(1)

        t = FakeTask()
        task_fn(t)
        t0 = time.monotonic()
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertLess(time.monotonic() - t0, 0.3)  # did not hold the worker child
        self.assertEqual(ran, [1])
        countdown, exc = t.retries[0]
        self.assertIsInstance(exc, raftpace.LimitExceeded)
        self.assertGreater(countdown, 4.0)
        self.assertEqual(len(self.agent.grants) - len(self.agent.forfeits), 1)  # nothing consumed by the retried one

    def test_paused_and_unavailable_retry(self):
        from raftpace.celery import paced

        @paced(self.client, "acme", max_block=0.1)
        def task_fn(task):
            pass

        t = FakeTask()
        self.client.pause("acme", 20)
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertIsInstance(t.retries[-1][1], raftpace.Paused)
        self.assertGreater(t.retries[-1][0], 19)
        self.agent.fail_next.append(("/v1/reserve/", 503, {"error": "x", "code": "no_leader"}, {"Retry-After": "1"}))
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertIsInstance(t.retries[-1][1], raftpace.Unavailable)

    def test_provider_429_pauses_fleet(self):
        from raftpace.celery import ProviderLimited, paced
        resp = types.SimpleNamespace(status_code=429, headers={"Retry-After": "40"})

        class ReqHTTPError(Exception):
            response = resp

        errs = [ReqHTTPError("429"), ProviderLimited(50), ValueError("other")]

        @paced(self.client, "acme", max_block=0.1)
        def task_fn(task):
            raise errs.pop(0)

        t = FakeTask()
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertAlmostEqual(self.client.paused_for("acme"), 40, delta=1)
        self.assertGreaterEqual(t.retries[-1][0], 40)
        self.client.pause  # the next one is paused at admission:
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertIsInstance(t.retries[-1][1], raftpace.Paused)
        self.assertEqual(len(errs), 2)

    def test_provider_limited_and_other_errors(self):
        from raftpace.celery import ProviderLimited, paced
        errs = [ProviderLimited(50), ValueError("other")]

        @paced(self.client, "acme", max_block=60)
        def task_fn(task):
            raise errs.pop(0)

        t = FakeTask()
        with self.assertRaises(Retry):
            task_fn(t)
        self.assertAlmostEqual(self.client.paused_for("acme"), 50, delta=1)
        self.agent.pauses.clear()
        with self.assertRaises(ValueError):
            task_fn(t)

    def test_paced_task_needs_celery(self):
        import raftpace.celery as rc
        try:
            import celery  # noqa: F401
        except ImportError:
            with self.assertRaises(ImportError):
                rc.PacedTask  # noqa: B018
        else:  # pragma: no cover
            self.assertTrue(issubclass(rc.PacedTask, celery.Task))


if __name__ == "__main__":
    unittest.main()
