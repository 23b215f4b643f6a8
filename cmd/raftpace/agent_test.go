package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
)

// startAgent runs `raftpace agent` in this process with a single-node
// cluster on free ports and returns its ready file's contents and a
// channel with the run's result.
func startAgent(t *testing.T, ctx context.Context, dir string, extra ...string) (agent.ReadyInfo, <-chan result) {
	t.Helper()
	ready := filepath.Join(dir, "ready.json")
	args := append([]string{"agent", "--node-id", "solo1", "--data-dir", filepath.Join(dir, "data"),
		"--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--bootstrap-expect", "1", "--raft-timing", "fast", "--ready-file", ready, "--log-level", "debug"}, extra...)
	// Later flags win: extra may override the node id and bootstrap-expect.
	done := make(chan result, 1)
	go func() { done <- runCLI(ctx, nil, args...) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var info agent.ReadyInfo
			if err := json.Unmarshal(b, &info); err != nil {
				t.Fatalf("ready file %q: %v", b, err)
			}
			return info, done
		}
		select {
		case r := <-done:
			t.Fatalf("agent exited %d before it was ready:\n%s", r.code, r.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready file after 20s")
		}
	}
}

func waitResult(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not exit within 30s")
		return result{}
	}
}

func TestAgent_InProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tl := filepath.Join(dir, "solo1.timeline")
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, dir, "--load", "k:3", "--timeline", tl)

	if info.NodeID != "solo1" || info.PID != os.Getpid() || strings.HasSuffix(info.Addr, ":0") ||
		strings.HasSuffix(info.GossipAddr, ":0") || strings.HasSuffix(info.HTTPAddr, ":0") || info.HTTPAddr == "" {
		t.Fatalf("ready file: %+v", info)
	}
	addr := []string{"--addr", info.HTTPAddr}
	op := func(want int, args ...string) result {
		t.Helper()
		return mustRun(t, want, append(args, addr...)...)
	}

	// Operator commands against the running agent.
	r := op(0, "limit", "set", "k", "--rate", "40", "--burst", "2")
	if strings.TrimSpace(r.stdout) != "k: rate 40/s, burst 2" {
		t.Errorf("limit set: %q", r.stdout)
	}
	op(0, "limit", "set", "--rate", "5", "other/key")
	// Flags before the subcommand, as in `raftpace limit --addr A set K`.
	mustRun(t, 0, "limit", "--addr", info.HTTPAddr, "--timeout=5s", "set", "k3", "--rate", "1")
	mustRun(t, 0, "limit", "--json", "--addr", info.HTTPAddr, "get", "k3")
	r = op(0, "limit", "list")
	if want := "KEY        RATE  BURST\nk          40/s  2\nk3         1/s   1\nother/key  5/s   1\n"; r.stdout != want {
		t.Errorf("limit list:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = op(0, "limit", "get", "other/key", "--json")
	if strings.Join(strings.Fields(r.stdout), "") != `{"key":"other/key","rate":5,"burst":1}` {
		t.Errorf("limit get --json: %s", r.stdout)
	}
	r = op(1, "limit", "get", "nope")
	if !strings.Contains(r.stderr, `raftpace: limit get "nope": unknown key: no limit is set for it`) {
		t.Errorf("limit get nope: %s", r.stderr)
	}
	r = op(0, "status")
	for _, want := range []string{"Node:           solo1 (Leader, granting)", "Leader:         solo1",
		"ID     ADDR", "solo1  " + info.Addr + "  voter  alive   *", "KEY        RATE  BURST"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = op(0, "status", "--json")
	var st struct {
		Leader  string `json:"leader"`
		Members []struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Leader != "solo1" ||
		len(st.Members) != 1 || st.Members[0].Role != "voter" {
		t.Errorf("status --json: %v %+v", err, st)
	}
	r = op(1, "join", "127.0.0.1:1")
	if !strings.Contains(r.stderr, "raftpace: join [127.0.0.1:1]: no address answered") ||
		strings.Contains(r.stderr, "node:") {
		t.Errorf("join to nowhere: %s", r.stderr)
	}

	// Let the load run, then stop the agent as a signal would.
	time.Sleep(1500 * time.Millisecond)
	stop()
	res := waitResult(t, done)
	if res.code != 0 {
		t.Fatalf("agent exit %d:\n%s", res.code, res.stderr)
	}
	for _, want := range []string{"load: starting", "load: stopped", "signal received", "node closed", "msg=stopped"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("agent log lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ready.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ready file left behind: %v", err)
	}
	// The timeline holds the admitted events, within the ceiling.
	// The bound holds up to the node's UseGrace (default 50ms).
	r = mustRun(t, 0, "check", "--rate", "40", "--burst", "2", "--key", "k", "--delta", "50ms", tl)
	if !strings.Contains(r.stdout, "OK: no window over R*W+B+R*50ms") || strings.Contains(r.stdout, "events=0 ") {
		t.Errorf("check of the agent's timeline:\n%s", r.stdout)
	}
}

func TestAgent_Leave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, dir)
	r := runCLI(t.Context(), nil, "leave", "--addr", info.HTTPAddr)
	switch r.code {
	case 0:
		// The node left; the agent exits by itself, with 0.
		if !strings.Contains(r.stdout, "solo1 has left the cluster") {
			t.Errorf("leave: %s", r.stdout)
		}
		if res := waitResult(t, done); res.code != 0 {
			t.Errorf("agent exit %d after leave:\n%s", res.code, res.stderr)
		}
	case 1:
		// The last node of a cluster may be refused; then it must still run.
		t.Log("leave refused: ", strings.TrimSpace(r.stderr))
		if !strings.Contains(r.stderr, "raftpace: leave: solo1 did not leave: ") {
			t.Errorf("leave: %s", r.stderr)
		}
		mustRun(t, 0, "status", "--addr", info.HTTPAddr)
		select {
		case res := <-done:
			t.Fatalf("agent exited (%d) after a failed leave:\n%s", res.code, res.stderr)
		default:
		}
		stop()
		if res := waitResult(t, done); res.code != 0 {
			t.Errorf("agent exit %d:\n%s", res.code, res.stderr)
		}
	default:
		t.Fatalf("leave: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestAgent_Cluster runs three agents in this process that find each other
// through --join and --bootstrap-expect, then makes one leave.
func TestAgent_Cluster(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var infos []agent.ReadyInfo
	var dones []<-chan result
	for i, id := range []string{"c1", "c2", "c3"} {
		extra := []string{"--node-id", id, "--bootstrap-expect", "3"}
		if i > 0 {
			extra = append(extra, "--join", infos[0].GossipAddr)
		}
		info, done := startAgent(t, ctx, filepath.Join(t.TempDir()), extra...)
		infos = append(infos, info)
		dones = append(dones, done)
	}
	// Setting a limit through a follower or the leader works once the
	// cluster has formed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runCLI(t.Context(), nil, "limit", "set", "k", "--rate", "10", "--addr", infos[2].HTTPAddr, "--timeout", "2s")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit set never succeeded: %s", r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := mustRun(t, 0, "status", "--addr", infos[0].HTTPAddr)
	if strings.Contains(r.stdout, "Leader:         (none)") || strings.Count(r.stdout, "  voter  ") != 3 {
		t.Errorf("status:\n%s", r.stdout)
	}

	r = mustRun(t, 0, "leave", "--addr", infos[1].HTTPAddr)
	if !strings.Contains(r.stdout, "c2 has left the cluster") || !strings.Contains(r.stdout, "c2 has stopped") {
		t.Errorf("leave: %s", r.stdout)
	}
	if res := waitResult(t, dones[1]); res.code != 0 || !strings.Contains(res.stderr, "left the cluster; shutting down") {
		t.Errorf("c2 exit %d:\n%s", res.code, res.stderr)
	}
	// The others still serve.
	mustRun(t, 0, "limit", "get", "k", "--addr", infos[0].HTTPAddr)
	stop()
	for _, i := range []int{0, 2} {
		if res := waitResult(t, dones[i]); res.code != 0 {
			t.Errorf("agent %d exit %d:\n%s", i, res.code, res.stderr)
		}
	}
}

func TestAgent_SoloLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tl := filepath.Join(dir, "solo.timeline")
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, dir, "--load", "k:2", "--load-mode", "solo", "--timeline", tl)
	mustRun(t, 0, "limit", "set", "k", "--rate", "50", "--addr", info.HTTPAddr)
	time.Sleep(time.Second)
	stop()
	if res := waitResult(t, done); res.code != 0 {
		t.Fatalf("agent exit %d:\n%s", res.code, res.stderr)
	}
	// Solo pacing alone still keeps one process within its limit; it
	// admitted events without the leader granting them.
	r := mustRun(t, 0, "check", "--rate", "50", "--key", "k", "--delta", "50ms", tl)
	if strings.Contains(r.stdout, "events=0 ") {
		t.Errorf("no events in solo mode:\n%s", r.stdout)
	}
}
