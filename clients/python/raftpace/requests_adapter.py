"""A transport adapter for the ``requests`` library (needs requests installed).

    import requests, raftpace
    from raftpace.requests_adapter import PacedAdapter

    s = requests.Session()
    s.mount("https://api.acme.example/", PacedAdapter(raftpace.Client(), "acme"))

Every request through the adapter first waits for the fleet's room for the
key (at most ``wait_timeout``: LimitExceeded/Paused otherwise, nothing
sent); a 429/503 answer with Retry-After pauses the key fleet-wide and is
returned to the caller as requests would (call raise_for_status as usual).
``import raftpace`` never imports this module or requests.
"""

from requests.adapters import HTTPAdapter  # ImportError without requests: intended


class PacedAdapter(HTTPAdapter):
    def __init__(self, client, key, wait_timeout=5.0, n=1, **kwargs):
        self.raftpace_client = client
        self.raftpace_key = key
        self.raftpace_wait_timeout = wait_timeout
        self.raftpace_n = n
        super().__init__(**kwargs)

    def send(self, request, **kwargs):
        self.raftpace_client.wait(self.raftpace_key, self.raftpace_n, self.raftpace_wait_timeout)
        resp = super().send(request, **kwargs)
        self.raftpace_client.observe(self.raftpace_key, resp)
        return resp
