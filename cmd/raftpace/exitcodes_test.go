package main

import (
	"net"
	"strings"
	"testing"
)

// The exit statuses `raftpace help` documents, from the real binary
// against a real agent: 0 done, 1 refused by the agent, 2 a usage error
// (values the cluster would refuse included, refused before any request;
// an agent's configuration too), 3 no agent at --addr.
func TestBinary_ExitCodes(t *testing.T) {
	bin := buildBinary(t)
	a := startBinAgent(t, bin, t.TempDir())
	if a.info.HTTPAddr == "" {
		t.Fatalf("agent did not start:\n%s", a.stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	live := a.info.HTTPAddr
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"limit", "set", "k", "--rate", "5", "--addr", live}, 0, ""},
		{[]string{"limit", "set", "--rate", "5", "--addr", live, "--", "-dash"}, 0, ""},
		{[]string{"limit", "get", "-dash", "--addr", live}, 2, "flag provided but not defined: -dash"},
		{[]string{"limit", "get", "--addr", live, "--", "-dash"}, 0, ""},
		{[]string{"limit", "get", "nokey", "--addr", live}, 1, `raftpace: limit get "nokey": unknown key`},
		{[]string{"join", "127.0.0.1:1", "--addr", live}, 1, "raftpace: join [127.0.0.1:1]: no address answered: failed to join 127.0.0.1:1:"},
		{[]string{"limit", "set", "k", "--rate", "-1", "--addr", live}, 2, "--rate -1: must be > 0"},
		{[]string{"limit", "set", "k", "--rate", "5", "--burst", "1.5", "--addr", live}, 2, `--burst: invalid integer "1.5"`},
		{[]string{"limit", "set", "k", "--rate", "1e-300", "--addr", live}, 2, "below the minimum"},
		{[]string{"status", "--timeout", "0s", "--addr", live}, 2, "--timeout: must be > 0"},
		{[]string{"check", "--rate", "-1", "x"}, 2, "--rate -1: must be > 0"},
		{[]string{"agent", "--data-dir", t.TempDir(), "--node-id", "", "--share-ttl", "-1s"}, 2, `--node-id "": must not be empty`},
		{[]string{"status", "--addr", dead}, 3, "cannot reach agent"},
		{[]string{"limit", "set", "k", "--rate", "5", "--addr", dead}, 3, "cannot reach agent"},
	}
	for _, tc := range tests {
		stdout, stderr, code := runBinary(t, bin, tc.args...)
		out := stdout + stderr
		if code != tc.code || !strings.Contains(out, tc.stderr) {
			t.Errorf("raftpace %q: exit %d, want %d and %q:\n%s", tc.args, code, tc.code, tc.stderr, out)
		}
		if strings.Contains(out, "fsm:") || strings.Contains(out, "node:") || strings.Contains(out, "goroutine ") {
			t.Errorf("raftpace %q: an internal prefix or a stack in front of the operator:\n%s", tc.args, out)
		}
	}
}
