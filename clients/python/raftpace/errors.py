"""The errors of the raftpace client, one per code of the data plane.

Every error carries the agent's message (``str(err)``, ``err.message``), its
``code`` (``"limit_exceeded"``, ``"no_leader"``, ...) and the HTTP ``status``
(``None`` for errors raised by the client itself).
"""

from typing import Any, Dict, List, Optional


class Error(Exception):
    """The base of every raftpace error."""

    def __init__(self, message, code=None, status=None, body=None):
        # type: (str, Optional[str], Optional[int], Optional[Dict[str, Any]]) -> None
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.body = body or {}

    def __repr__(self):
        return "%s(%r, code=%r, status=%r)" % (type(self).__name__, self.message, self.code, self.status)

    def __reduce__(self):
        # Picklable with every field, whatever the subclass's signature
        # (Celery's prefork pool pickles the exception a retry carries).
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls, message, state):
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(state)
    return e


class ConfigError(Error):
    """The client was not told where the agent is (or was told nonsense)."""


class LimitExceeded(Error):
    """The wait would exceed the caller's maximum. Nothing was consumed.

    ``wait`` is the agent's hint (seconds), not a grant; ``key`` names the
    key that refused (of a reservation over several keys), when the agent
    said.
    """

    def __init__(self, message, code="limit_exceeded", status=429, body=None, wait=0.0):
        super().__init__(message, code, status, body)
        self.wait = float(wait or 0.0)
        self.key = (body or {}).get("key")


class Paused(LimitExceeded):
    """The key's fleet-wide pause outlasts the caller's maximum wait.

    ``remaining`` (also ``wait``) is how long the pause still lasts.
    """

    def __init__(self, message, code="paused", status=429, body=None, remaining=0.0):
        super().__init__(message, code, status, body, wait=remaining)
        self.remaining = float(remaining or 0.0)


class QuotaExhausted(LimitExceeded):
    """The key's quota (a budget per calendar window, UTC) is spent.

    ``reset`` is when the next window begins (an RFC 3339 string, UTC);
    ``wait`` (seconds) is the time until then. A quota's next window is
    never reserved ahead: ``wait`` sleeps to the reset when its timeout
    allows, ``reserve`` raises this at once.
    """

    def __init__(self, message, code="quota_exhausted", status=429, body=None, wait=0.0):
        super().__init__(message, code, status, body, wait=wait)
        self.reset = (body or {}).get("reset")


class ConcurrencyLimit(Error):
    """The caps stayed full for the caller's maximum wait; ``full`` names them."""

    def __init__(self, message, code="concurrency_limit", status=429, body=None, full=None):
        # type: (str, str, int, Optional[Dict[str, Any]], Optional[List[str]]) -> None
        super().__init__(message, code, status, body)
        self.full = list(full or [])


class UnknownKey(Error):
    """No limit (or cap) is set for the key."""


class UnknownSlot(Error):
    """The agent does not hold this slot (it restarted): it ends at its deadline."""


class Unavailable(Error):
    """The agent cannot admit now; retry after ``retry_after`` seconds.

    Codes: ``no_leader``, ``stopped`` (fallback budget spent), ``overloaded``,
    ``closed`` (the agent is shutting down: retry elsewhere or later), and the
    client's own ``unreachable`` (no connection, a broken one, a timeout) and
    ``late`` (grants kept arriving too late to be used). Never an admission.
    """

    def __init__(self, message, code=None, status=None, body=None, retry_after=1.0):
        super().__init__(message, code, status, body)
        self.retry_after = float(retry_after if retry_after is not None else 1.0)


class InvalidRequest(Error):
    """A field, key or body failed validation; ``field`` names it when known."""

    def __init__(self, message, code="invalid", status=400, body=None, field=None):
        super().__init__(message, code, status, body)
        self.field = field


class Unauthorized(Error):
    """TCP only: the token is missing or wrong."""


_UNAVAILABLE_CODES = ("no_leader", "stopped", "overloaded", "closed")


def _retry_after(headers):
    if headers is None:
        return None
    v = headers.get("Retry-After")
    if v is None:
        return None
    try:
        return float(v.strip())
    except ValueError:
        return None


def error_from_answer(status, body, headers=None, text=""):
    # type: (int, Optional[Dict[str, Any]], Any, str) -> Error
    """Maps an error answer of the agent to the matching exception."""
    if not isinstance(body, dict):
        body = {}
    code = body.get("code")
    msg = body.get("error") or (text.strip()[:500] if text else "") or ("HTTP %d" % status)
    ra = _retry_after(headers)
    if code == "quota_exhausted":
        w = body.get("wait")
        return QuotaExhausted(msg, code, status, body, wait=w if w is not None else (ra or 0.0))
    if code == "limit_exceeded" or (code is None and status == 429):
        w = body.get("wait")
        return LimitExceeded(msg, code or "limit_exceeded", status, body, wait=w if w is not None else (ra or 0.0))
    if code == "paused":
        r = body.get("remaining")
        return Paused(msg, code, status, body, remaining=r if r is not None else (ra or 0.0))
    if code == "concurrency_limit":
        return ConcurrencyLimit(msg, code, status, body, full=body.get("full"))
    if code == "unknown_key":
        return UnknownKey(msg, code, status, body)
    if code == "unknown_slot":
        return UnknownSlot(msg, code, status, body)
    if code in _UNAVAILABLE_CODES or (code is None and status >= 500):
        return Unavailable(msg, code, status, body, retry_after=ra if ra is not None else 1.0)
    if code == "invalid" or (code is None and status == 400):
        return InvalidRequest(msg, code or "invalid", status, body, field=body.get("field"))
    if code == "unauthorized" or (code is None and status in (401, 403)):
        return Unauthorized(msg, code or "unauthorized", status, body)
    return Error(msg, code, status, body)
