"""The raftpace client: the agent's data plane (docs/dataplane.md) from Python."""

import contextlib
import functools
import json
import logging
import os
import socket as _socket
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _transport
from .errors import (ConfigError, InvalidRequest, LimitExceeded, Paused, QuotaExhausted, Unavailable, UnknownSlot,
                     error_from_answer)
from .retry_after import MAX_PAUSE, PAUSE_STATUSES, pause_for

log = logging.getLogger("raftpace")

__all__ = ["Client", "Grant", "Slot", "escape_key"]

#: wait(timeout=None) reserves at most this far ahead per call, then asks again.
UNBOUNDED_STEP = 60.0
#: how many grants in a row may arrive too late before reserve gives up.
MAX_LATE = 5
_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0

#: compact JSON for request bodies (one encoder: json.dumps builds one per call
#: when given separators).
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_decode = json.JSONDecoder().decode  # on str: json.loads(bytes) sniffs the encoding each time


@functools.lru_cache(maxsize=4096)
def _quote_key(key):
    # type: (str) -> str
    return urllib.parse.quote(key, safe="$&+:=@")


def escape_key(key):
    # type: (str) -> str
    """KEY as one path segment, escaped like Go's url.PathEscape."""
    if not isinstance(key, str):
        raise InvalidRequest("key must be a str, not %s" % type(key).__name__, field="key", status=None)
    if key == "":
        raise InvalidRequest("key must not be empty", field="key", status=None)
    return _quote_key(key)


def _wants(wants):
    # type: (Any) -> List[Tuple[str, int]]
    """Keys, or (key, n) pairs, as (key, n) pairs."""
    if isinstance(wants, str):
        raise TypeError("raftpace: wants is a list of keys or (key, n) pairs, not one key: %r" % (wants,))
    out = []
    for w in wants:
        if isinstance(w, str):
            out.append((w, 1))
        else:
            k, n = w
            out.append((k, int(n)))
    if not out:
        raise InvalidRequest("raftpace: a reservation names at least one key", field="keys")
    return out


def _grant_from(ans, key, n, sent, recv):
    """The Grant an agent's answer describes, or Unavailable."""
    ans = ans or {}
    try:
        return Grant(key, n, float(ans["wait"]), float(ans["use_by"]), float(ans.get("held", 0.0)), sent, recv)
    except (KeyError, TypeError, ValueError):
        raise Unavailable("raftpace: malformed grant from the agent: %r" % (ans,), code="unreachable")


def _names(ws):
    return ", ".join(repr(k) for k, _ in ws)


class Grant(object):
    """A granted reservation placed on this process's monotonic clock.

    ``go_at`` = recv + wait: the events go no earlier. ``use_by`` = sent +
    held + use_by: they go no later (docs/dataplane.md, "Using a grant").
    """

    __slots__ = ("key", "n", "wait", "use_by_s", "held", "sent", "recv", "go_at", "use_by")

    def __init__(self, key, n, wait, use_by_s, held, sent, recv):
        self.key = key
        self.n = n
        self.wait = wait
        self.use_by_s = use_by_s
        self.held = held
        self.sent = sent
        self.recv = recv
        self.go_at = recv + wait
        self.use_by = sent + held + use_by_s

    def delay(self, now):
        # type: (float) -> float
        return max(0.0, self.go_at - now)

    def usable(self):
        """False when the grace was eaten before the events could even go."""
        return self.go_at <= self.use_by

    def late(self, now):
        # type: (float) -> bool
        return now > self.use_by

    def __repr__(self):
        return "Grant(key=%r, n=%d, go_at=%.6f, use_by=%.6f)" % (self.key, self.n, self.go_at, self.use_by)


class Slot(object):
    """Concurrency slots taken with Client.acquire_slot / Client.slot.

    ``deadline`` is on the monotonic clock: the holder must be done by then
    (the agent reclaims the slot at its ttl whatever happens).
    """

    def __init__(self, client, id, keys, deadline):
        self._client = client
        self.id = id
        self.keys = keys
        self.deadline = deadline
        self.released = False

    def remaining(self):
        return self.deadline - self._client._clock()

    def release(self):
        """Gives the slot back (idempotent). An agent that no longer knows it
        (it restarted) is fine: the slot ends at its deadline."""
        if self.released:
            return
        self.released = True
        try:
            self._client._call("DELETE", "/v1/slots/" + urllib.parse.quote(self.id, safe=""))
        except UnknownSlot:
            pass

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        # The block's outcome is what the caller acts on: a slot that could
        # not be given back (agent unreachable) ends at its deadline anyway.
        try:
            self.release()
        except Exception as e:
            log.warning("raftpace: releasing slot %s failed (it ends at its deadline): %s", self.id, e)
        return False


class _SlotContext(object):
    def __init__(self, client, keys, ttl, max_wait):
        self._args = (keys, ttl, max_wait)
        self._client = client
        self._slot = None  # type: Optional[Slot]

    def __enter__(self):
        self._slot = self._client.acquire_slot(*self._args)
        return self._slot

    def __exit__(self, et, ev, tb):
        assert self._slot is not None
        return self._slot.__exit__(et, ev, tb)


def _parse_addr(addr):
    # type: (str) -> Tuple[str, int]
    a = addr.strip()
    if "://" in a:
        u = urllib.parse.urlsplit(a)
        if u.scheme != "http":
            raise ConfigError("raftpace: only http:// is served by the agent, not %r" % addr)
        host, port = u.hostname, u.port
        if not host:
            raise ConfigError("raftpace: no host in %r" % addr)
        return host, port or 80
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError("raftpace: address %r is not HOST:PORT or http://HOST:PORT" % addr)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class Client(object):
    """A connection to the raftpace agent beside this process.

    ``socket``: the agent's unix socket (``--socket``); ``url``: its TCP
    address (``--http``), ``HOST:PORT`` or ``http://HOST:PORT``. Without
    either, RAFTPACE_SOCKET and RAFTPACE_ADDR are read; a socket wins when
    both are given. ``token`` (or RAFTPACE_TOKEN) is sent on TCP only.
    ``timeout`` bounds each request (plus any max_wait it asks the agent to
    spend). One Client may be shared by threads and survives os.fork.
    """

    def __init__(self, socket=None, url=None, token=None, timeout=5.0):
        # type: (Optional[str], Optional[str], Optional[str], float) -> None
        if socket is None and url is None:
            socket = os.environ.get("RAFTPACE_SOCKET") or None
            url = os.environ.get("RAFTPACE_ADDR") or None
        if token is None:
            token = (os.environ.get("RAFTPACE_TOKEN") or "").strip() or None
        self.timeout = float(timeout)
        self.token = token
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         "User-Agent": "raftpace-python/0.1"}
        if socket:
            self.socket_path = socket  # type: Optional[str]
            self.address = None  # type: Optional[Tuple[str, int]]
            connect = _transport.unix_connector(socket)
            host_header = "localhost"
        elif url:
            self.socket_path = None
            self.address = _parse_addr(url)
            host, port = self.address
            connect = _transport.tcp_connector(host, port)
            host_header = ("[%s]" % host) if ":" in host else host
            if port != 80:
                host_header += ":%d" % port
            if token:
                self._headers["Authorization"] = "Bearer " + token
        else:
            raise ConfigError("raftpace: no agent address: pass socket= or url=, or set RAFTPACE_SOCKET "
                              "(the agent's --socket) or RAFTPACE_ADDR (its --http HOST:PORT)")
        # Every request's head after its request line, less Content-Length
        # (the same for all: built once).
        fields = [("Host", host_header)] + sorted(self._headers.items())
        for k, v in fields:
            if any(c in v for c in "\r\n\0") or any(ord(c) > 255 for c in v):
                raise ConfigError("raftpace: the %s header would hold a line break, a NUL or a character "
                                  "beyond Latin-1" % k)
        self._head_fields = "".join("%s: %s\r\n" % kv for kv in fields).encode("latin-1")
        self._pool = _transport.Pool(lambda: _transport.Connection(connect))
        # Hooks for tests (and for callers that keep their own clocks).
        self._clock = time.monotonic  # type: Callable[[], float]
        self._sleep = time.sleep  # type: Callable[[float], None]

    def __repr__(self):
        where = self.socket_path or "%s:%d" % self.address  # type: ignore
        return "raftpace.Client(%r)" % where

    def close(self):
        """Closes the idle connections (the client stays usable)."""
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------------
    # transport

    def _call(self, method, path, body=None, extra_timeout=0.0, retry_unsent_only=False):
        # type: (str, str, Optional[Dict[str, Any]], float, bool) -> Tuple[Any, float, float]
        """Sends one request; returns (answer JSON or None, sent, recv).

        Retry rule: a request that fails on a connection taken from the pool
        (the agent may have closed it while it was idle) is sent once more on
        a fresh connection if the failure came before any answer, since
        nothing was answered, nothing was admitted. If the agent did act on
        the first copy, the repeat is still safe for the ceiling: a reserve
        consumes a second slot and the first grant, never answered, is never
        used (lost capacity, not extra events); pauses and forfeits are
        idempotent for the limit. Taking slots (``retry_unsent_only``) is
        only repeated when the request could not even be written, so a
        phantom slot does not hold a cap until its ttl. A failure on a fresh
        connection, a timeout or a partial answer is never repeated: it is
        raised as Unavailable (code "unreachable").
        """
        data = b"" if body is None else _dumps(body).encode("utf-8")
        request = b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode("ascii"), path.encode("ascii"), self._head_fields, len(data), data)
        timeout = self.timeout + max(0.0, extra_timeout)
        pool = self._pool
        for attempt in (0, 1):
            conn, reused = pool.get()
            phase = "send"
            sent = self._clock()
            try:
                conn.send(request, timeout)
                phase = "answer"
                status, headers, raw, will_close = conn.read_answer()
                recv = self._clock()
            except _socket.timeout as e:
                conn.close()
                raise Unavailable("raftpace: agent did not answer %s %s within %.3gs" % (method, path, timeout),
                                  code="unreachable", retry_after=1.0) from e
            except (OSError, _transport.ProtocolError) as e:
                conn.close()
                # NoAnswer, a reset or a broken pipe: ConnectionErrors, all
                # before any byte of the answer (after one: IncompleteAnswer).
                if (attempt == 0 and reused and isinstance(e, ConnectionError)
                        and (phase == "send" or not retry_unsent_only)):
                    continue
                raise Unavailable("raftpace: %s %s: %s: %s" % (method, path, type(e).__name__, e),
                                  code="unreachable", retry_after=1.0) from e
            except BaseException:  # e.g. KeyboardInterrupt mid-answer: the stream is out of step
                conn.close()
                raise
            if will_close:
                conn.close()
            else:
                pool.put(conn)
            if 200 <= status < 300:
                if not raw:
                    return None, sent, recv
                try:
                    return _decode(raw.decode("utf-8")), sent, recv
                except ValueError:  # UnicodeDecodeError too
                    return None, sent, recv
            return self._answer(status, _transport.Headers(headers), raw), sent, recv
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _answer(status, headers, raw):
        text = raw.decode("utf-8", "replace")
        ans = None
        if text.strip():
            try:
                ans = json.loads(text)
            except ValueError:
                ans = None
        if 200 <= status < 300:
            return ans
        raise error_from_answer(status, ans, headers, text)

    # ------------------------------------------------------------------
    # reservations

    def reserve_grant(self, key, n=1, max_wait=0.0):
        # type: (str, int, float) -> Grant
        """One reservation: a Grant, or LimitExceeded/Paused (nothing consumed).

        The caller must go no earlier than ``grant.go_at`` and, if its clock
        is past ``grant.use_by`` when it would go, must not go: forfeit and
        reserve again (``wait`` and ``reserve`` do this).
        """
        path = "/v1/reserve/" + escape_key(key)
        ans, sent, recv = self._call("POST", path, {"n": int(n), "max_wait": float(max_wait)})
        return _grant_from(ans, key, int(n), sent, recv)

    def forfeit(self, key, n=1):
        # type: (str, int) -> None
        """Tells the agent a grant went unused (best effort: never raises)."""
        try:
            self._call("POST", "/v1/forfeit/" + escape_key(key), {"n": int(n)})
        except Exception as e:  # the counters are nice to have; the slot is lost anyway
            log.debug("raftpace: forfeit of %r failed: %s", key, e)

    def reserve_all_grant(self, wants, max_wait=0.0):
        # type: (Any, float) -> Grant
        """One reservation over several keys: a Grant for all, or none consumed.

        ``wants`` lists keys, or ``(key, n)`` pairs (1 to 16 keys, each once).
        The events of every key are granted at one instant that each key's
        limit allows; LimitExceeded/Paused name the key that refused in
        ``e.key``. The grant's ``key`` is the tuple of keys.
        """
        ws = _wants(wants)
        if len(ws) == 1:
            return self.reserve_grant(ws[0][0], ws[0][1], max_wait)
        body = {"keys": [{"key": k, "n": n} for k, n in ws], "max_wait": float(max_wait)}
        ans, sent, recv = self._call("POST", "/v1/reserve", body)
        return _grant_from(ans, tuple(k for k, _ in ws), sum(n for _, n in ws), sent, recv)

    def _forfeit_grant(self, ws):
        # One forfeit per grant, whatever its keys: the agent counts grants.
        self.forfeit(ws[0][0], ws[0][1])

    def _usable_grant(self, wants, max_wait, deadline=None):
        # type: (List[Tuple[str, int]], float, Optional[float]) -> Grant
        """A grant whose window can still be met, forfeiting those that cannot."""
        for _ in range(MAX_LATE):
            if deadline is not None:
                max_wait = min(max_wait, max(0.0, deadline - self._clock()))
            g = self.reserve_all_grant(wants, max_wait)
            if g.usable() and not g.late(max(self._clock(), g.go_at)):
                return g
            self._forfeit_grant(wants)
        raise Unavailable("raftpace: %d grants for %s in a row came too late to be used (a round trip or a "
                          "pause longer than the agent's --use-grace)" % (MAX_LATE, _names(wants)), code="late",
                          retry_after=0.1)

    def reserve(self, key, n=1, max_wait=0.0):
        # type: (str, int, float) -> float
        """Reserves n events; returns the delay (seconds from now) to honour.

        Raises LimitExceeded when the wait would exceed max_wait, Paused when
        a pause outlasts it (nothing consumed either way). The events must go
        after the delay, and promptly: a caller that may be late should use
        reserve_grant and check Grant.late itself, or use wait().
        """
        g = self._usable_grant([(key, int(n))], max_wait)
        return g.delay(self._clock())

    def reserve_all(self, wants, max_wait=0.0):
        # type: (Any, float) -> float
        """reserve over several keys (see reserve_all_grant): the delay to honour."""
        g = self._usable_grant(_wants(wants), max_wait)
        return g.delay(self._clock())

    def _sleep_until(self, t):
        while True:
            d = t - self._clock()
            if d <= 0:
                return
            self._sleep(d)

    def wait_all(self, wants, timeout=None):
        # type: (Any, Optional[float]) -> None
        """wait over several keys: returns once the events of every key may go.

        ``wants`` lists keys, or ``(key, n)`` pairs. No key's slot is held
        while another is awaited: the fleet grants all at one instant, or
        (LimitExceeded naming the key in ``e.key``) none.
        """
        self._wait(_wants(wants), timeout)

    def wait(self, key, n=1, timeout=None):
        # type: (str, int, Optional[float]) -> None
        """Blocks until the fleet may do n more events of key, then returns.

        Reserves with max_wait = what is left of ``timeout`` and sleeps on this
        process's clock. Raises LimitExceeded (nothing consumed) at once when
        the wait would be longer than timeout, Paused when a pause outlasts
        it; Unavailable answers are retried with backoff within the timeout.
        ``timeout=None`` waits as long as it takes, reserving at most
        UNBOUNDED_STEP seconds ahead per request.
        """
        self._wait([(key, int(n))], timeout)

    def _wait(self, ws, timeout):
        deadline = None if timeout is None else self._clock() + max(0.0, float(timeout))
        backoff = _BACKOFF_MIN
        while True:
            now = self._clock()
            left = float("inf") if deadline is None else max(0.0, deadline - now)
            step = min(left, UNBOUNDED_STEP)
            try:
                g = self._usable_grant(ws, step, deadline)
            except QuotaExhausted as e:
                # A window is never reserved ahead: sleep to its reset.
                if deadline is not None and e.wait > left:
                    raise
                self._sleep(max(_BACKOFF_MIN, e.wait))
                continue
            except LimitExceeded as e:  # and Paused
                hint = e.wait
                if deadline is not None and (step >= left or hint > left):
                    raise
                # only when the wait is beyond one step: come back closer to it
                self._sleep(max(_BACKOFF_MIN, min(hint - step, UNBOUNDED_STEP) if hint > step else _BACKOFF_MIN))
                continue
            except Unavailable as e:
                d = min(max(backoff, e.retry_after if e.code != "late" else 0.0), 30.0)
                if deadline is not None and self._clock() + d > deadline:
                    raise
                log.debug("raftpace: %s; retrying in %.2fs", e, d)
                self._sleep(d)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            self._sleep_until(g.go_at)
            if g.late(self._clock()):  # a GC pause or SIGSTOP ate the grace
                self._forfeit_grant(ws)
                continue
            return

    @contextlib.contextmanager
    def limit(self, key, wait_timeout=5.0, n=1):
        # type: (str, Optional[float], int) -> Iterator[None]
        """``with client.limit("acme"): call_acme()``: waits for the fleet's
        room (at most wait_timeout) before the block; raises LimitExceeded
        or Paused instead of running it."""
        self.wait(key, n, wait_timeout)
        yield

    def limited(self, key, wait_timeout=5.0, n=1):
        # type: (str, Optional[float], int) -> Callable
        """Decorator: each call waits like ``limit`` first."""
        def deco(fn):
            @functools.wraps(fn)
            def wrapper(*a, **kw):
                self.wait(key, n, wait_timeout)
                return fn(*a, **kw)
            return wrapper
        return deco

    # ------------------------------------------------------------------
    # pauses and limits

    def pause(self, key, seconds):
        # type: (str, float) -> float
        """Pauses key fleet-wide for seconds (0, 86400]; returns the pause
        in force (a longer pause in force stays)."""
        ans, _, _ = self._call("POST", "/v1/pauses/" + escape_key(key), {"seconds": float(seconds)})
        return float((ans or {}).get("remaining_s", 0.0))

    def paused_for(self, key):
        # type: (str) -> float
        """Seconds the key's pause still lasts (0.0 when not paused)."""
        ans, _, _ = self._call("GET", "/v1/pauses/" + escape_key(key))
        return float((ans or {}).get("remaining_s", 0.0))

    def get_limit(self, key):
        # type: (str) -> Tuple[float, int]
        """(rate per second, burst) of key's limit; UnknownKey when unset."""
        ans, _, _ = self._call("GET", "/v1/limits/" + escape_key(key))
        ans = ans or {}
        return float(ans["rate"]), int(ans["burst"])

    def remaining(self, key):
        # type: (str) -> Dict[str, Any]
        """What key's limit has left, as the leader counts it: a dict with
        ``tokens`` (events the rate would admit at once, fleet-wide) and
        ``burst``, and for a limit with a quota ``quota`` ("100000/day"),
        ``used``, ``left``, ``window_start`` and ``reset`` (RFC 3339, UTC).
        One round trip to the leader: a read for planning, not a grant."""
        ans, _, _ = self._call("GET", "/v1/remaining/" + escape_key(key))
        return dict(ans or {})

    # ------------------------------------------------------------------
    # concurrency slots

    def acquire_slot(self, keys, ttl=30.0, max_wait=0.0):
        # type: (Union[str, Sequence[str]], float, float) -> Slot
        """Takes one slot of each key's cap, all or none; ConcurrencyLimit
        when they stay full for max_wait. Release it (or use ``slot``)."""
        if isinstance(keys, str):
            keys = [keys]
        keys = list(keys)
        for k in keys:
            escape_key(k)  # validates
        ans, sent, recv = self._call("POST", "/v1/slots",
                                     {"keys": keys, "ttl": float(ttl), "max_wait": float(max_wait)},
                                     extra_timeout=float(max_wait), retry_unsent_only=True)
        ans = ans or {}
        deadline = sent + float(ans.get("held", 0.0)) + float(ans.get("deadline", 0.0))
        return Slot(self, str(ans.get("id", "")), list(ans.get("keys", keys)), deadline)

    def slot(self, keys, ttl=30.0, max_wait=0.0):
        # type: (Union[str, Sequence[str]], float, float) -> _SlotContext
        """``with client.slot(["global", "team:42"]) as s: ...`` takes the
        slots on entry and gives them back on exit, also on exceptions."""
        return _SlotContext(self, keys, ttl, max_wait)

    # ------------------------------------------------------------------
    # providers' answers

    def observe(self, key, response, statuses=PAUSE_STATUSES):
        # type: (str, Any, Tuple[int, ...]) -> Optional[float]
        """Turns a provider's 429/503 with Retry-After into a fleet-wide pause
        of key. ``response`` may be a urllib response or HTTPError, an
        http.client.HTTPResponse or a requests Response. Returns the pause
        asked for (capped to 24 h), or None. Failures to pause are logged,
        never raised: the provider's answer is what the caller acts on."""
        secs = pause_for(response, statuses)
        if secs is None or secs <= 0:
            return secs
        try:
            self.pause(key, min(secs, MAX_PAUSE))
        except Exception as e:
            log.warning("raftpace: pausing %r for %.3gs failed: %s", key, secs, e)
        return secs

    def urlopen(self, key, request, wait_timeout=5.0, n=1, on_limited="raise", retries=0, opener=None, **kw):
        """urllib.request.urlopen paced by key. See raftpace.paced_http.urlopen."""
        from .paced_http import urlopen
        return urlopen(self, key, request, wait_timeout=wait_timeout, n=n, on_limited=on_limited,
                       retries=retries, opener=opener, **kw)
