"""HTTP/1.1 keep-alive connections to the agent: unix socket or TCP.

A lean client for the data plane's small JSON exchanges (docs/dataplane.md):
a request is written as one bytes object (head and body together), and the
answer is read with a small parser on a per-connection buffer: the status
line, the headers up to the blank line (only Content-Length,
Transfer-Encoding and Connection decide the framing; every header is kept
for the error mapping, e.g. Retry-After), then exactly Content-Length bytes.
The agent answers with Content-Length (admin.WriteJSON sets it; net/http
does too for short bodies); a chunked answer is decoded, and one with
neither is read until the agent closes the connection.

The pool is per process: connections are checked out by one thread at a
time (so any number of threads may share a Client) and a connection made
in one process is never used in another. After ``os.fork`` the child drops
every inherited connection (``os.register_at_fork``) and, should a pool be
reached some other way, a PID check on each checkout and check-in does the
same: the child opens its own. Dropping only closes the child's copy of the
descriptor, the parent's connection is untouched.
"""

import os
import socket
import threading
import weakref

_pools = weakref.WeakSet()  # type: weakref.WeakSet

#: an answer's head (status line and headers) longer than this is refused.
MAX_HEAD = 64 * 1024
#: an answer's body longer than this is refused (the data plane's are < 1 KiB).
MAX_BODY = 16 * 1024 * 1024
_RECV = 65536


class ProtocolError(Exception):
    """The agent's answer is not HTTP/1.1 this client can read, or it stopped
    part-way (never a grant: the request fails as unreachable)."""


class IncompleteAnswer(ProtocolError):
    """The connection ended (closed or reset) after part of the answer."""


class NoAnswer(ConnectionError):
    """The agent closed the connection before any byte of the answer (an
    idle keep-alive connection it had already closed, typically)."""


class Headers(dict):
    """An answer's headers: lower-case names; get/[]/in ignore case."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name):
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name):
        return dict.__contains__(self, name.lower())


def unix_connector(path):
    def connect(timeout):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(path)
        except BaseException:
            s.close()
            raise
        return s
    return connect


def tcp_connector(host, port):
    def connect(timeout):
        s = socket.create_connection((host, port), timeout=timeout)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return s
    return connect


class Connection(object):
    """One keep-alive connection, used by one thread for one exchange at a time.

    ``sock`` is None until connected and again once closed.
    """

    __slots__ = ("_connect", "sock", "_buf", "_got", "_timeout", "_raftpace_pid")

    def __init__(self, connect):
        self._connect = connect
        self.sock = None  # type: socket.socket
        self._buf = b""
        self._got = False  # some byte of the current answer came
        self._timeout = None
        self._raftpace_pid = None

    def close(self):
        s, self.sock = self.sock, None
        self._buf = b""
        if s is not None:
            s.close()

    def idle_clean(self):
        """True when no stray bytes follow the last answer (safe to reuse)."""
        return self.sock is not None and not self._buf

    def send(self, data, timeout):
        """Connects if needed and writes DATA (one request) at once."""
        s = self.sock
        if s is None:
            s = self.sock = self._connect(timeout)
            self._timeout = timeout
        elif timeout != self._timeout:
            s.settimeout(timeout)
            self._timeout = timeout
        s.sendall(data)

    def _more(self, buf):
        """BUF plus the next bytes read; IncompleteAnswer at the end of the stream
        or a reset once some of the answer came, NoAnswer before any."""
        try:
            data = self.sock.recv(_RECV)
        except ConnectionError as e:
            if self._got:
                raise IncompleteAnswer("connection lost part-way through the answer: %s" % e) from e
            raise
        if not data:
            if self._got:
                raise IncompleteAnswer("the agent closed the connection part-way through the answer")
            raise NoAnswer("the agent closed the connection before answering")
        self._got = True
        return buf + data if buf else data

    def read_answer(self):
        """Reads one answer: (status, headers (a dict, lower-case names), body
        bytes, will_close)."""
        buf, self._buf = self._buf, b""
        self._got = bool(buf)
        while True:
            end = buf.find(b"\r\n\r\n")
            while end < 0:
                if len(buf) > MAX_HEAD:
                    raise ProtocolError("answer head longer than %d bytes" % MAX_HEAD)
                buf = self._more(buf)
                end = buf.find(b"\r\n\r\n")
            lines = buf[:end].decode("latin-1").split("\r\n")
            buf = buf[end + 4:]
            status_line = lines[0].split(" ", 2)
            version = status_line[0]
            if (len(status_line) < 2 or not version.startswith("HTTP/1.") or len(status_line[1]) != 3
                    or not status_line[1].isdigit()):
                raise ProtocolError("not an HTTP/1.x status line: %r" % lines[0][:100])
            status = int(status_line[1])
            headers = {}  # lower-case names (Headers makes them case-blind for the error path)
            name = None
            for line in lines[1:]:
                if line[0] in " \t" and name is not None:  # obsolete line folding
                    headers[name] += " " + line.strip()
                    continue
                name, sep, value = line.partition(":")
                if not sep:
                    raise ProtocolError("malformed header line: %r" % line[:100])
                name = name.strip().lower()
                value = value.strip()
                if name in headers:
                    old = headers[name]
                    if name == "content-length":
                        if old != value:
                            raise ProtocolError("conflicting Content-Length headers: %r, %r" % (old, value))
                        continue
                    value = old + ", " + value
                headers[name] = value
            if 100 <= status < 200:  # an interim answer (never asked for): the real one follows
                continue
            break
        conn = headers.get("connection")
        if conn is None:
            will_close = version == "HTTP/1.0"
        else:
            conn = conn.lower()
            will_close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        te = headers.get("transfer-encoding")
        cl = headers.get("content-length")
        if status in (204, 304):
            body = b""
        elif te is not None:
            if te.lower().rsplit(",", 1)[-1].strip() == "chunked":
                body, buf = self._chunked(buf)
            else:
                body, buf, will_close = self._until_close(buf), b"", True
        elif cl is not None:
            if not cl.isdigit():
                raise ProtocolError("bad Content-Length %r" % cl[:50])
            n = int(cl)
            if n > MAX_BODY:
                raise ProtocolError("answer body of %d bytes is too long" % n)
            while len(buf) < n:
                buf = self._more(buf)
            body, buf = buf[:n], buf[n:]
        else:  # HTTP/1.1 without a length: the body ends with the connection
            body, buf, will_close = self._until_close(buf), b"", True
        self._buf = buf
        return status, headers, body, will_close

    def _until_close(self, buf):
        parts = [buf]
        size = len(buf)
        while True:
            try:
                data = self.sock.recv(_RECV)
            except ConnectionError as e:
                raise IncompleteAnswer("connection lost before the end of the answer: %s" % e) from e
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > MAX_BODY:
                raise ProtocolError("answer body longer than %d bytes" % MAX_BODY)
            parts.append(data)

    def _line(self, buf):
        end = buf.find(b"\r\n")
        while end < 0:
            if len(buf) > MAX_HEAD:
                raise ProtocolError("chunk line longer than %d bytes" % MAX_HEAD)
            buf = self._more(buf)
            end = buf.find(b"\r\n")
        return buf[:end], buf[end + 2:]

    def _chunked(self, buf):
        parts = []
        size = 0
        while True:
            line, buf = self._line(buf)
            hexsize = line.split(b";", 1)[0].strip()
            try:
                n = int(hexsize, 16)
            except ValueError:
                raise ProtocolError("bad chunk size %r" % line[:50])
            if n < 0:
                raise ProtocolError("bad chunk size %r" % line[:50])
            if n == 0:
                while True:  # trailers, up to the blank line
                    line, buf = self._line(buf)
                    if not line:
                        return b"".join(parts), buf
            size += n
            if size > MAX_BODY:
                raise ProtocolError("answer body longer than %d bytes" % MAX_BODY)
            while len(buf) < n + 2:
                buf = self._more(buf)
            if buf[n:n + 2] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            parts.append(buf[:n])
            buf = buf[n + 2:]


class Pool(object):
    """Idle keep-alive connections of one process, shared by its threads."""

    def __init__(self, factory, max_idle=16):
        self._factory = factory
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle = []  # type: list
        self._pid = os.getpid()
        _pools.add(self)

    def _after_fork(self):
        # In the child: the lock may have been held by a thread that does
        # not exist here, and the idle connections are the parent's.
        self._lock = threading.Lock()
        idle, self._idle = self._idle, []
        self._pid = os.getpid()
        for c in idle:
            _close_quietly(c)

    def _check_pid(self):
        if self._pid != os.getpid():
            self._after_fork()

    def get(self):
        """Returns (connection, reused)."""
        self._check_pid()
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        c = self._factory()
        c._raftpace_pid = self._pid
        return c, False

    def put(self, conn):
        # No getpid here: the thread that got CONN checked the PID then, and
        # a fork since (by another thread) leaves this thread out of the
        # child; the hook or the next get's check handles the pool itself.
        if conn._raftpace_pid != self._pid or not conn.idle_clean():
            _close_quietly(conn)
            return
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        _close_quietly(conn)

    def idle_count(self):
        self._check_pid()
        with self._lock:
            return len(self._idle)

    def close(self):
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            _close_quietly(c)


def _close_quietly(conn):
    try:
        conn.close()
    except Exception:
        pass


def _after_fork_in_child():
    for p in list(_pools):
        p._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
