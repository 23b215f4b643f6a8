"""raftpace: a fleet-wide rate limiter's client for Python workers.

The client speaks the agent's data plane (docs/dataplane.md) over its unix
socket or TCP. Standard library only; Python 3.9+.

    import raftpace
    client = raftpace.Client()            # RAFTPACE_SOCKET or RAFTPACE_ADDR
    with client.limit("acme", wait_timeout=5.0):
        call_acme()
"""

from .client import Client, Grant, Slot, escape_key
from .errors import (ConcurrencyLimit, ConfigError, Error, InvalidRequest, LimitExceeded, Paused, QuotaExhausted,
                     Unauthorized, Unavailable, UnknownKey, UnknownSlot)
from .retry_after import parse_retry_after

__version__ = "0.1.0"

__all__ = [
    "Client", "Grant", "Slot", "escape_key", "parse_retry_after",
    "Error", "ConfigError", "LimitExceeded", "Paused", "QuotaExhausted", "ConcurrencyLimit", "UnknownKey", "UnknownSlot",
    "Unavailable", "InvalidRequest", "Unauthorized",
]
