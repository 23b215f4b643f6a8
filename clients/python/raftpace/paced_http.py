"""Pacing urllib / http.client calls to a provider.

Policy of ``urlopen`` (and of the requests adapter):

1. Before each request it waits for the fleet's room for ``key``
   (``client.wait(key, n, wait_timeout)``): LimitExceeded or Paused is
   raised, and nothing sent, when that would take longer than
   ``wait_timeout``.
2. When the provider answers 429 or 503 with a Retry-After (delta-seconds
   or an HTTP-date, capped to 24 h), the whole fleet is paused for that long
   (``client.pause``): every worker holds off the key, not only this one.
3. Then, with ``retries`` left, it waits again (through the pause, within
   ``wait_timeout``) and resends; otherwise ``on_limited="raise"`` (the
   default) re-raises urllib's HTTPError as urllib would, and
   ``on_limited="return"`` returns the HTTPError (a file-like response with
   .code and .headers) instead. A 429/503 without Retry-After pauses nothing
   and is raised or returned the same way.

For http.client callers: call ``client.wait(key)`` before the request and
``client.observe(key, response)`` after it.
"""

import urllib.error
import urllib.request

from .retry_after import PAUSE_STATUSES


def urlopen(client, key, request, wait_timeout=5.0, n=1, on_limited="raise", retries=0, opener=None, **kw):
    if on_limited not in ("raise", "return"):
        raise ValueError("on_limited must be 'raise' or 'return', not %r" % (on_limited,))
    open_ = opener.open if opener is not None else urllib.request.urlopen
    attempt = 0
    while True:
        client.wait(key, n, wait_timeout)
        try:
            return open_(request, **kw)
        except urllib.error.HTTPError as e:
            if e.code not in PAUSE_STATUSES:
                raise
            client.observe(key, e)
            if attempt < retries:
                attempt += 1
                e.close()
                continue
            if on_limited == "return":
                return e
            raise
