package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLS_SecuredCluster runs a 3-node cluster secured with the files the
// binary's own `tls init` and `tls node` write (mutual TLS between nodes,
// encrypted gossip), then tries a 4th agent with wrong credentials: none at
// all, the gossip key without a certificate, a certificate of another CA, the
// right certificate with another gossip key. Each time it must not become a
// raft member, must not admit anything, cannot change a limit through its own
// admin API, and the logs say why on both sides. Restarted with the right
// credentials (and an admin token) it joins and its load is admitted.
func TestTLS_SecuredCluster(t *testing.T) {
	begin := time.Now()
	dir := t.TempDir()
	pki, other := filepath.Join(dir, "pki"), filepath.Join(dir, "other")
	tlsTool(t, "tls", "init", "--dir", pki)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		tlsTool(t, "tls", "node", n, "--dir", pki)
	}
	tlsTool(t, "tls", "init", "--dir", other)
	tlsTool(t, "tls", "node", "n4", "--dir", other)
	creds := func(pkiDir, name, gossipDir string) []string {
		return []string{
			"--tls-ca", filepath.Join(pkiDir, "ca.pem"),
			"--tls-cert", filepath.Join(pkiDir, name+".pem"),
			"--tls-key", filepath.Join(pkiDir, name+"-key.pem"),
			"--gossip-key-file", filepath.Join(gossipDir, "gossip.key"),
		}
	}
	gossipOnly := []string{"--gossip-key-file", filepath.Join(pki, "gossip.key")}

	const key, rate = "k", 20
	c := &cluster{t: t, dir: dir}
	t.Cleanup(c.stopAll)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		a := c.newAgent(id, nil)
		a.args = append([]string{"--bootstrap-expect", "3", "--log-format", "json", "--log-level", "info"}, creds(pki, id, pki)...)
		var join []string
		if i > 1 {
			join = []string{c.agents[0].addrs.GossipAddr}
		}
		a.start(join)
	}
	secured := c.agents[:3]
	c.waitLeader(30 * time.Second)
	secured[0].mustCLI("limit", "set", key, "--rate", fmt.Sprint(rate), "--burst", "2")
	t.Logf("secured cluster up, limit set (%.1fs)", time.Since(begin).Seconds())

	n4 := c.newAgent("n4", nil)
	load := []string{"--log-format", "json", "--log-level", "info", "--load", key + ":2", "--timeline", n4.timeline}
	join := []string{secured[0].addrs.GossipAddr}

	for _, tc := range []struct {
		name  string
		creds []string
		// Log lines (substrings) expected from n4 and from the secured nodes.
		n4Log, clusterLog []string
	}{
		{"no credentials", nil,
			[]string{"join refused: gossip key mismatch?", "remote state is encrypted and encryption is not configured"},
			[]string{"encryption is configured but remote state is not encrypted", "gossip key mismatch?"}},
		{"gossip key but no certificate", gossipOnly,
			[]string{"but this node has no TLS configured"},
			[]string{"not adding member to raft: its address failed the TLS check", "peer closed the connection during the TLS handshake"}},
		{"certificate of another CA", creds(other, "n4", pki),
			[]string{"the peer refused this node's certificate"},
			[]string{"not adding member to raft: its address failed the TLS check", "x509: certificate signed by unknown authority"}},
		{"right certificate, another gossip key", creds(pki, "n4", other),
			[]string{"join refused: gossip key mismatch?", "no installed keys could decrypt the message"},
			[]string{"no installed keys could decrypt the message", "gossip key mismatch?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n4.t = t
			marks := logMarks(c.agents)
			n4.args = append(append([]string(nil), load...), tc.creds...)
			n4.start(join)
			defer n4.stop()

			// Both sides say why, in their logs.
			waitLogs(t, marks, tc.n4Log, n4)
			waitLogs(t, marks, tc.clusterLog, secured...)

			// A member of no raft configuration: the secured nodes list it at
			// most as seen in gossip (role "none").
			for _, a := range secured {
				st, err := a.status()
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range st.Members {
					if m.ID == "n4" && m.Role != "none" {
						t.Errorf("%s lists n4 as %s", a.id, m.Role)
					}
				}
			}
			// Its own admin API cannot change the cluster's limit.
			if out, code := n4.cli("limit", "set", key, "--rate", "999", "--timeout", "2s"); code == 0 {
				t.Errorf("limit set through n4 succeeded:\n%s", out)
			}
			if got := tlsLimitRate(t, secured[1], key); got != rate {
				t.Errorf("the cluster's limit is %v after n4's limit set, want %v", got, rate)
			}
			// Its load admitted nothing.
			if b, _ := os.ReadFile(n4.timeline); len(b) > 0 {
				t.Errorf("n4 admitted events:\n%s", firstLines(string(b), 3))
			}
		})
		n4.t = t
		if t.Failed() {
			return
		}
	}

	// With the right credentials (and an admin token, since its API is on
	// loopback it is optional) n4 joins and its load is admitted.
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("e2e-secret-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n4.args = append(append(append([]string(nil), load...), creds(pki, "n4", pki)...), "--http-token-file", token)
	n4.start(join)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := secured[0].status()
		member := false
		if err == nil {
			for _, m := range st.Members {
				member = member || (m.ID == "n4" && (m.Role == "voter" || m.Role == "nonvoter"))
			}
		}
		b, _ := os.ReadFile(n4.timeline)
		if member && bytes.Count(b, []byte("\n")) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 with the right credentials: member %v, %d events admitted after 30s; log:\n%s",
				member, bytes.Count(b, []byte("\n")), n4.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Its admin API wants the token now.
	if out, code := n4.cli("status"); code == 0 || !strings.Contains(out, "missing bearer token") {
		t.Errorf("status without the token: exit %d:\n%s", code, out)
	}
	if out, code := n4.cli("limit", "get", key, "--token-file", token); code != 0 || !strings.Contains(out, "20/s") {
		t.Errorf("limit get with the token: exit %d:\n%s", code, out)
	}
	t.Logf("done in %.1fs", time.Since(begin).Seconds())
}

// tlsTool runs the raftpace binary (a tool command, no agent) and fails the
// test if it fails.
func tlsTool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("raftpace %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// logMarks returns the current size of each agent's log.
func logMarks(agents []*agent) map[*agent]int64 {
	m := make(map[*agent]int64, len(agents))
	for _, a := range agents {
		if fi, err := os.Stat(a.logPath); err == nil {
			m[a] = fi.Size()
		}
	}
	return m
}

// waitLogs waits until every one of wants appears in what one of agents
// logged since marks, and logs the first line with each.
func waitLogs(t *testing.T, marks map[*agent]int64, wants []string, agents ...*agent) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var missing, lines []string
		for _, w := range wants {
			found := ""
			for _, x := range agents {
				b, _ := os.ReadFile(x.logPath)
				if from := marks[x]; int64(len(b)) >= from {
					b = b[from:]
				}
				if i := bytes.Index(b, []byte(w)); i >= 0 && found == "" {
					start := bytes.LastIndexByte(b[:i], '\n') + 1
					end := bytes.IndexByte(b[i:], '\n')
					if end < 0 {
						end = len(b) - i
					}
					found = x.id + ": " + string(b[start:i+end])
				}
			}
			if found == "" {
				missing = append(missing, w)
			} else {
				lines = append(lines, found)
			}
		}
		if len(missing) == 0 {
			for i, l := range lines {
				if i == 0 || l != lines[i-1] {
					t.Log(l)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			var tails strings.Builder
			for _, x := range agents {
				fmt.Fprintf(&tails, "--- %s:\n%s\n", x.id, x.tail())
			}
			t.Fatalf("logs lack %q after 15s:\n%s", missing, tails.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tlsLimitRate reads key's rate through agent a.
func tlsLimitRate(t *testing.T, a *agent, key string) float64 {
	t.Helper()
	out := a.mustCLI("limit", "get", key, "--json")
	var l struct {
		Rate float64 `json:"rate"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("limit get --json: %v: %s", err, out)
	}
	return l.Rate
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
