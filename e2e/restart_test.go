package e2e

import (
	"strings"
	"testing"
	"time"
)

// Limits survive a restart of every process with their data dirs, and the
// restarted cluster forms again with the same members.
func TestE2E_LimitsSurviveFullRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, agentOpts{})
	c.agents[0].mustCLI("limit", "set", "persist-a", "--rate", "12.5", "--burst", "3")
	c.agents[2].mustCLI("limit", "set", "persist-b", "--rate", "0.5")
	c.stopAll()
	for _, a := range c.agents {
		c.restart(a)
	}
	c.waitLeader(30 * time.Second)
	for _, a := range c.agents {
		out := waitCLI(t, a, 10*time.Second, "limit", "get", "persist-a")
		if !strings.Contains(out, "12.5") || !strings.Contains(out, "3") {
			t.Errorf("%s: limit get persist-a after restart: %q", a.id, out)
		}
		list := a.mustCLI("limit", "list")
		if !strings.Contains(list, "persist-a") || !strings.Contains(list, "persist-b") {
			t.Errorf("%s: limit list after restart:\n%s", a.id, list)
		}
	}
	// The agents left on SIGTERM (down to the last voter); restarted, the
	// others rejoin as nonvoters and are promoted once caught up.
	var st statusDoc
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		st, err = c.agents[1].status()
		voters := 0
		for _, m := range st.Members {
			if m.Role == "voter" {
				voters++
			}
		}
		if err == nil && len(st.Members) == 3 && voters == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after restart, 20 s on: %+v (err %v), want 3 voters", st.Members, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitCLI retries a command until it succeeds (a follower may not have
// applied the log yet right after an election).
func waitCLI(t *testing.T, a *agent, d time.Duration, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, code := a.cli(args...)
		if code == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: raftpace %v kept failing: %s", a.id, args, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
