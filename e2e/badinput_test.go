package e2e

import (
	"math/rand"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Bad input gets a clear error naming what was wrong; no process crashes and
// the cluster's state is unchanged.
func TestE2E_BadInput(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, agentOpts{})
	a := c.agents[1]
	a.mustCLI("limit", "set", "good", "--rate", "5", "--burst", "2")
	before := a.mustCLI("limit", "list")

	cases := []struct {
		name string
		args []string
		want string // in the error output, naming what was wrong
	}{
		{"rate zero", []string{"limit", "set", "k", "--rate", "0"}, "Rate"},
		{"rate negative", []string{"limit", "set", "k", "--rate", "-3"}, "Rate"},
		{"rate NaN", []string{"limit", "set", "k", "--rate", "NaN"}, "Rate"},
		{"rate Inf", []string{"limit", "set", "k", "--rate", "Inf"}, "Rate"},
		{"burst zero", []string{"limit", "set", "k", "--rate", "5", "--burst", "0"}, "Burst"},
		{"key too long", []string{"limit", "set", strings.Repeat("x", 257), "--rate", "5"}, "256"},
		{"key with space", []string{"limit", "set", "a b", "--rate", "5"}, "key"},
		{"unknown key", []string{"limit", "get", "never-set"}, "unknown key"},
	}
	for _, tc := range cases {
		out, code := a.cli(tc.args...)
		if code == 0 {
			t.Errorf("%s: exit 0, want an error; output:\n%s", tc.name, out)
			continue
		}
		if !strings.Contains(strings.ToLower(out), strings.ToLower(tc.want)) {
			t.Errorf("%s: error does not name %q:\n%s", tc.name, tc.want, out)
		}
		if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
			t.Errorf("%s: output looks like a crash:\n%s", tc.name, out)
		}
	}

	// Random bytes at every node's raft/RPC port and gossip port.
	rng := rand.New(rand.NewSource(42))
	for _, ag := range c.agents {
		for i := 0; i < 20; i++ {
			junk := make([]byte, 1+rng.Intn(4096))
			rng.Read(junk)
			for _, addr := range []string{ag.addrs.Addr, ag.addrs.GossipAddr} {
				if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					conn.SetDeadline(time.Now().Add(time.Second))
					conn.Write(junk)
					conn.Close()
				}
			}
			if conn, err := net.Dial("udp", ag.addrs.GossipAddr); err == nil {
				conn.Write(junk[:min(len(junk), 1400)])
				conn.Close()
			}
		}
	}

	// The junk was dropped and said so in each agent's log (the transport
	// names the bad stream byte or frame and the remote address).
	for _, ag := range c.agents {
		waitForLog(t, ag, 10*time.Second, "transport: unknown stream byte", "transport: bad RPC frame")
	}

	// Everyone is still up, agrees on a leader, and holds the same limits.
	for _, ag := range c.agents {
		if !ag.running() {
			t.Fatalf("%s died; log:\n%s", ag.id, ag.tail())
		}
	}
	c.waitLeader(20 * time.Second)
	for _, ag := range c.agents {
		if got := waitCLI(t, ag, 10*time.Second, "limit", "list"); got != before {
			t.Errorf("%s: limits changed by bad input:\nbefore:\n%s\nafter:\n%s", ag.id, before, got)
		}
	}
	// The cluster still grants: a limit can still be set and read everywhere.
	c.agents[0].mustCLI("limit", "set", "after", "--rate", "3")
	for _, ag := range c.agents {
		waitCLI(t, ag, 10*time.Second, "limit", "get", "after")
	}
}

// waitForLog waits until the agent's log contains one of the given texts.
func waitForLog(t *testing.T, a *agent, d time.Duration, any ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(a.logPath)
		for _, s := range any {
			if strings.Contains(string(b), s) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: log never mentioned any of %q", a.id, any)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
