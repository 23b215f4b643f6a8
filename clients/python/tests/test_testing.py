"""raftpace.testing's failures: an agent that cannot start is an
AgentError (an AssertionError) naming why, never a hang or a silent
fallback. Its success path is every test in test_agent.py."""

import os
import tempfile
import time
import unittest

from raftpace.testing import Agent, AgentError


class AgentStartFailures(unittest.TestCase):
    def test_no_binary(self):
        env = os.environ.pop("RAFTPACE_BINARY", None)
        try:
            with self.assertRaisesRegex(AgentError, "RAFTPACE_BINARY"):
                Agent()
        finally:
            if env is not None:
                os.environ["RAFTPACE_BINARY"] = env

    def test_binary_that_does_not_run(self):
        with self.assertRaisesRegex(AgentError, "does not run"):
            Agent("/nonexistent/raftpace").start()

    def test_binary_that_exits(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "raftpace")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho 'agent: --socket: taken' >&2\nexit 3\n")
            os.chmod(fake, 0o755)
            begin = time.monotonic()
            with self.assertRaisesRegex(AgentError, "(?s)exited with 3.*--socket: taken"):
                Agent(fake, tmp=os.path.join(d, "agent")).start()
            self.assertLess(time.monotonic() - begin, 10)


if __name__ == "__main__":
    unittest.main()
