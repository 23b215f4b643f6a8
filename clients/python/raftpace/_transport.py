"""HTTP/1.1 keep-alive connections to the agent: unix socket or TCP.

The pool is per process: connections are checked out by one thread at a
time (so any number of threads may share a Client) and a connection made
in one process is never used in another. After ``os.fork`` the child drops
every inherited connection (``os.register_at_fork``) and, should a pool be
reached some other way, a PID check on each checkout and check-in does the
same: the child opens its own. Dropping only closes the child's copy of the
descriptor, the parent's connection is untouched.
"""

import http.client
import os
import socket
import threading
import weakref

_pools = weakref.WeakSet()  # type: weakref.WeakSet


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection over an AF_UNIX stream socket."""

    def __init__(self, path, timeout=None):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def _send_output(self, message_body=None, encode_chunked=False):
        # One write for the head and a bytes body (http.client writes them
        # apart): one syscall less, and the agent reads the request at once.
        if isinstance(message_body, bytes) and not encode_chunked:
            self._buffer.extend((b"", b""))
            msg = b"\r\n".join(self._buffer)
            del self._buffer[:]
            self.send(msg + message_body)
            return
        super()._send_output(message_body, encode_chunked)


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
        c._raftpace_pid = os.getpid()
        return c, False

    def put(self, conn):
        self._check_pid()
        if getattr(conn, "_raftpace_pid", None) != os.getpid():
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
