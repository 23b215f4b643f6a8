"""Reading a provider's "slow down" answers (429/503 with Retry-After)."""

import email.utils
import time
from typing import Any, Optional, Tuple

MAX_PAUSE = 86400.0  # the data plane's largest pause, 24 h
PAUSE_STATUSES = (429, 503)


def parse_retry_after(value, now=None):
    # type: (Optional[str], Optional[float]) -> Optional[float]
    """Seconds from a Retry-After value: delta-seconds or an HTTP-date.

    Returns None when absent or unreadable, 0.0 for a date in the past, and
    at most MAX_PAUSE (24 h). ``now`` is the wall clock (time.time()): an
    HTTP-date is the provider's wall clock, so the wall clock is the only
    thing to compare it with.
    """
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    secs = None  # type: Optional[float]
    try:
        secs = float(v)
        if secs != secs:  # NaN
            return None
    except ValueError:
        try:
            dt = email.utils.parsedate_to_datetime(v)
        except (TypeError, ValueError, IndexError):
            return None
        if dt is None:
            return None
        if dt.tzinfo is None:  # RFC 7231 dates are GMT
            import datetime
            dt = dt.replace(tzinfo=datetime.timezone.utc)
        secs = dt.timestamp() - (time.time() if now is None else now)
    if secs <= 0:
        return 0.0
    return min(secs, MAX_PAUSE)


def status_and_headers(obj):
    # type: (Any) -> Tuple[Optional[int], Any]
    """(status, headers) of a response or an error carrying one.

    Knows urllib's HTTPError and responses (.code/.status, .headers),
    http.client.HTTPResponse (.status, .getheader), requests' Response
    (.status_code, .headers) and HTTPError (.response).
    """
    if obj is None:
        return None, None
    resp = getattr(obj, "response", None)
    if resp is not None and not isinstance(obj, (int, str)) and hasattr(resp, "status_code"):
        obj = resp
    status = None
    for attr in ("status_code", "status", "code"):
        s = getattr(obj, attr, None)
        if isinstance(s, int):
            status = s
            break
    headers = getattr(obj, "headers", None)
    if headers is None and hasattr(obj, "getheaders"):
        try:
            headers = dict(obj.getheaders())
        except Exception:
            headers = None
    return status, headers


def header(headers, name):
    # type: (Any, str) -> Optional[str]
    if headers is None:
        return None
    try:
        v = headers.get(name)
    except Exception:
        v = None
    if v is None and isinstance(headers, dict):
        for k, val in headers.items():
            if k.lower() == name.lower():
                return val
    return v


def pause_for(obj, statuses=PAUSE_STATUSES):
    # type: (Any, Tuple[int, ...]) -> Optional[float]
    """The fleet-wide pause a provider's answer asks for, or None.

    A 429 or 503 (``statuses``) with a readable Retry-After: its seconds,
    capped to 24 h (0.0 for a date already past). Anything else: None.
    """
    status, headers = status_and_headers(obj)
    if status not in statuses:
        return None
    return parse_retry_after(header(headers, "Retry-After"))
