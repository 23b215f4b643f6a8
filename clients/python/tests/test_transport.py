"""The lean HTTP/1.1 reader against a raw socket server that answers
exactly the bytes a test scripts: split answers, odd header case, chunked
bodies, closes before and during answers."""

import json
import os
import socket
import tempfile
import threading
import time
import unittest

import raftpace
from raftpace import _transport

GRANT = b'{"wait":0,"use_by":0.5,"held":0.0001}'


def ok(body=GRANT, extra=b""):
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


class RawAgent(object):
    """Serves each request with script(conn_no, req_no, request) -> a list of
    actions: bytes are written (one write each), a float sleeps, None closes
    the connection."""

    def __init__(self, script, tcp=False):
        self.script = script
        self.requests = []  # (conn_no, request bytes)
        self.conns = 0
        self.lock = threading.Lock()
        if tcp:
            self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.lsock.bind(("127.0.0.1", 0))
            self.url = "127.0.0.1:%d" % self.lsock.getsockname()[1]
            self._dir = None
        else:
            self._dir = tempfile.mkdtemp(prefix="rp-raw-")
            self.path = os.path.join(self._dir, "agent.sock")
            self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.lsock.bind(self.path)
        self.lsock.listen(16)
        self._socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.lsock.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass
        if self._dir:
            os.unlink(self.path)
            os.rmdir(self._dir)

    def _accept(self):
        while True:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                n = self.conns
            self._socks.append(s)
            threading.Thread(target=self._serve, args=(s, n), daemon=True).start()

    def _serve(self, s, conn_no):
        buf = b""
        req_no = 0
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = s.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(v)
                while len(buf) < n:
                    buf += s.recv(65536)
                req, buf = head + b"\r\n\r\n" + buf[:n], buf[n:]
                req_no += 1
                with self.lock:
                    self.requests.append((conn_no, req))
                for action in self.script(conn_no, req_no, req):
                    if action is None:
                        s.close()
                        return
                    if isinstance(action, float):
                        time.sleep(action)
                    else:
                        s.sendall(action)
        except OSError:
            pass
        finally:
            s.close()


class RawCase(unittest.TestCase):
    tcp = False
    token = None

    def serve(self, script, timeout=5.0):
        self.agent = RawAgent(script, tcp=self.tcp)
        self.addCleanup(self.agent.close)
        if self.tcp:
            self.client = raftpace.Client(url=self.agent.url, token=self.token, timeout=timeout)
        else:
            self.client = raftpace.Client(socket=self.agent.path, timeout=timeout)
        self.addCleanup(self.client.close)
        return self.client


class ParserTest(RawCase):
    def test_split_into_single_bytes(self):
        def script(c, r, req):
            a = ok(extra=b"Date: Thu, 03 Dec 2026 20:00:00 GMT\r\nX-Content-Type-Options: nosniff\r\n")
            return [a[i:i + 1] for i in range(len(a))] if r == 1 else [a]
        c = self.serve(script)
        g = c.reserve_grant("k")
        self.assertEqual((g.wait, g.use_by_s, g.held), (0.0, 0.5, 0.0001))
        c.reserve_grant("k")
        self.assertEqual(self.agent.conns, 1)  # kept alive across the split answer
        self.assertEqual(c._pool.idle_count(), 1)

    def test_split_at_every_boundary(self):
        a = ok()
        cuts = list(range(1, len(a)))

        def script(c, r, req):
            i = cuts[r - 1]
            return [a[:i], 0.001, a[i:]]
        c = self.serve(script)
        for _ in cuts:
            self.assertEqual(c.reserve("k"), 0.0)
        self.assertEqual(self.agent.conns, 1)

    def test_odd_header_case(self):
        body = b'{"error":"no leader","code":"no_leader"}'

        def script(c, r, req):
            if r == 1:
                return [b"HTTP/1.1 503 Service Unavailable\r\ncOnTeNt-LeNgTh: %d\r\nRETRY-after:  7 \r\n\r\n%s"
                        % (len(body), body)]
            return [b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH:%d\r\n\r\n%s" % (len(GRANT), GRANT)]
        c = self.serve(script)
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve_grant("k")
        self.assertEqual(cm.exception.code, "no_leader")
        self.assertEqual(cm.exception.retry_after, 7.0)
        self.assertEqual(c.reserve_grant("k").use_by_s, 0.5)
        self.assertEqual(self.agent.conns, 1)

    def test_retry_after_without_body(self):
        c = self.serve(lambda c, r, req: [b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\n"
                                          b"content-length: 0\r\n\r\n"])
        with self.assertRaises(raftpace.LimitExceeded) as cm:
            c.reserve_grant("k")
        self.assertEqual(cm.exception.wait, 3.0)

    def test_connection_close(self):
        c = self.serve(lambda c, r, req: [ok(extra=b"Connection: close\r\n")])
        for _ in range(3):
            self.assertEqual(c.reserve("k"), 0.0)
            self.assertEqual(c._pool.idle_count(), 0)
        self.assertEqual(self.agent.conns, 3)

    def test_http10_closes(self):
        c = self.serve(lambda c, r, req: [ok().replace(b"HTTP/1.1", b"HTTP/1.0", 1)])
        c.reserve("k")
        c.reserve("k")
        self.assertEqual(self.agent.conns, 2)

    def test_closed_before_answer_on_reused_is_retried(self):
        def script(c, r, req):
            return [None] if (c, r) == (1, 2) else [ok()]
        c = self.serve(script)
        c.reserve("k")
        self.assertEqual(c.reserve("k"), 0.0)  # conn 1 closed without a byte: sent again on conn 2
        self.assertEqual([n for n, _ in self.agent.requests], [1, 1, 2])

    def test_closed_before_answer_on_fresh_is_not_retried(self):
        c = self.serve(lambda c, r, req: [None])
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve_grant("k")
        self.assertEqual(cm.exception.code, "unreachable")
        self.assertIn("NoAnswer", str(cm.exception))
        self.assertEqual(len(self.agent.requests), 1)

    def test_slot_not_retried_after_write(self):
        slot = b'{"id":"s-1","keys":["c"],"deadline":30,"held":0}'

        def script(c, r, req):
            return [None] if (c, r) == (1, 2) else [ok(slot)]
        c = self.serve(script)
        c.acquire_slot("c")
        with self.assertRaises(raftpace.Unavailable):
            c.acquire_slot("c")
        self.assertEqual(len(self.agent.requests), 2)

    def test_truncated_body_is_an_error_never_a_grant(self):
        a = ok()

        def script(c, r, req):
            return [ok()] if r == 1 else [a[:-5], 0.01, None]
        c = self.serve(script)
        c.reserve_grant("k")
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve_grant("k")  # on a reused connection: still not repeated
        self.assertEqual(cm.exception.code, "unreachable")
        self.assertIn("IncompleteAnswer", str(cm.exception))
        self.assertEqual(len(self.agent.requests), 2)

    def test_truncated_head(self):
        def script(c, r, req):
            return [ok()] if r == 1 else [b"HTTP/1.1 200 OK\r\nContent-Le", None]
        c = self.serve(script)
        c.reserve("k")
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve("k")
        self.assertIn("IncompleteAnswer", str(cm.exception))
        self.assertEqual(len(self.agent.requests), 2)

    def test_garbage(self):
        c = self.serve(lambda c, r, req: [b"SSH-2.0-OpenSSH\r\n\r\n"])
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve("k")
        self.assertIn("ProtocolError", str(cm.exception))
        c2 = self.serve(lambda c, r, req: [b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n"])
        with self.assertRaises(raftpace.Unavailable):
            c2.reserve("k")
        c3 = self.serve(lambda c, r, req: [b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"
                                           b"{}  "])
        with self.assertRaises(raftpace.Unavailable):
            c3.reserve("k")

    def test_repeated_headers(self):
        body = b'{"error":"busy","code":"overloaded"}'
        c = self.serve(lambda c, r, req: [b"HTTP/1.1 503 Busy\r\nContent-Length: %d\r\nContent-Length: %d\r\n"
                                          b"X-A: 1\r\nX-A: 2\r\nRetry-After: 4\r\n\r\n%s"
                                          % (len(body), len(body), body)])
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve_grant("k")
        self.assertEqual((cm.exception.code, cm.exception.retry_after), ("overloaded", 4.0))
        self.assertEqual(c._pool.idle_count(), 1)

    def test_chunked(self):
        chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(GRANT[i:i + 7]), GRANT[i:i + 7])
                          for i in range(0, len(GRANT), 7))
        a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-Trailer: 1\r\n\r\n"
        c = self.serve(lambda c, r, req: [a[i:i + 3] for i in range(0, len(a), 3)])
        self.assertEqual(c.reserve_grant("k").use_by_s, 0.5)
        self.assertEqual(c.reserve_grant("k").use_by_s, 0.5)
        self.assertEqual(self.agent.conns, 1)

    def test_chunked_truncated(self):
        a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + GRANT[:16] + b"\r\n"
        c = self.serve(lambda c, r, req: [a, None])
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve("k")
        self.assertIn("IncompleteAnswer", str(cm.exception))

    def test_no_length_reads_until_close(self):
        c = self.serve(lambda c, r, req: [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",
                                          GRANT[:10], 0.01, GRANT[10:], None])
        self.assertEqual(c.reserve_grant("k").use_by_s, 0.5)
        self.assertEqual(c._pool.idle_count(), 0)
        c.reserve_grant("k")
        self.assertEqual(self.agent.conns, 2)

    def test_no_content_and_interim(self):
        c = self.serve(lambda c, r, req: [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n"
                                          b"Date: x\r\n\r\n"])
        c._call("DELETE", "/v1/slots/s-1")
        self.assertIsNone(c._call("DELETE", "/v1/slots/s-2")[0])
        self.assertEqual(self.agent.conns, 1)

    def test_stray_bytes_after_answer_drop_the_connection(self):
        c = self.serve(lambda c, r, req: [ok() + b"HTTP/1.1 200 OK\r\n"])
        c.reserve("k")
        self.assertEqual(c._pool.idle_count(), 0)
        c.reserve("k")
        self.assertEqual(self.agent.conns, 2)

    def test_timeout(self):
        c = self.serve(lambda c, r, req: [1.0], timeout=0.2)
        t0 = time.monotonic()
        with self.assertRaises(raftpace.Unavailable) as cm:
            c.reserve("k")
        self.assertLess(time.monotonic() - t0, 0.9)
        self.assertIn("did not answer", str(cm.exception))
        self.assertEqual(len(self.agent.requests), 1)

    def test_timing_sent_before_write_recv_after_read(self):
        c = self.serve(lambda c, r, req: [0.05, ok()[:20], 0.1, ok()[20:]])
        g = c.reserve_grant("k")
        self.assertGreaterEqual(g.recv - g.sent, 0.15)

    def test_request_bytes(self):
        c = self.serve(lambda c, r, req: [ok()])
        c.reserve_grant("a/b é", n=2, max_wait=1.5)
        c.paused_for("k")
        (_, post), (_, get) = self.agent.requests
        self.assertEqual(post, b"POST /v1/reserve/a%2Fb%20%C3%A9 HTTP/1.1\r\nHost: localhost\r\n"
                               b"Accept: application/json\r\nContent-Type: application/json\r\n"
                               b"User-Agent: raftpace-python/0.1\r\nContent-Length: 22\r\n\r\n"
                               b'{"n":2,"max_wait":1.5}')
        self.assertTrue(get.startswith(b"GET /v1/pauses/k HTTP/1.1\r\n"))
        self.assertTrue(get.endswith(b"Content-Length: 0\r\n\r\n"))


class TCPParserTest(RawCase):
    tcp = True
    token = "sekrit"

    def test_request_bytes_tcp(self):
        c = self.serve(lambda c, r, req: [ok()[:7], ok()[7:]])
        c.reserve("k")
        c.reserve("k")
        (_, req), _ = self.agent.requests
        head, _, body = req.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.assertEqual(lines[0], b"POST /v1/reserve/k HTTP/1.1")
        self.assertIn(b"Host: " + self.agent.url.encode(), lines)
        self.assertIn(b"Authorization: Bearer sekrit", lines)
        self.assertEqual(json.loads(body), {"n": 1, "max_wait": 0.0})
        self.assertEqual(self.agent.conns, 1)

    def test_bad_token(self):
        with self.assertRaises(raftpace.ConfigError):
            raftpace.Client(url="127.0.0.1:1", token="a\r\nX-Evil: 1")


class HeadersTest(unittest.TestCase):
    def test_case(self):
        h = _transport.Headers()
        dict.__setitem__(h, "retry-after", "2")
        self.assertEqual(h.get("Retry-After"), "2")
        self.assertIn("RETRY-AFTER", h)
        self.assertEqual(h["retry-After"], "2")


if __name__ == "__main__":
    unittest.main()
