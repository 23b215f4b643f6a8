package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is the outcome of one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line with ctx and a fake environment (nil: empty;
// the test process's own RAFTPACE_* variables never leak in).
func runCLI(ctx context.Context, env map[string]string, args ...string) result {
	var out, errOut syncBuffer
	c := &cli{ctx: ctx, stdout: &out, stderr: &errOut, getenv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}}
	code := c.main(args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func mustRun(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := runCLI(t.Context(), nil, args...)
	if r.code != want {
		t.Fatalf("raftpace %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, want, r.stdout, r.stderr)
	}
	return r
}
