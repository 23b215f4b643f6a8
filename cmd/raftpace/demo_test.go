package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	tl := filepath.Join(t.TempDir(), "demo.timeline")
	r := runCLI(t.Context(), nil, "demo", "--duration", "4s", "--rate", "20", "--timeline", tl)
	if r.code != 0 || !strings.Contains(r.stdout, "verdict: OK") {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// One line per second, every node admitting.
	line := regexp.MustCompile(`(?m)^t=\ds\s+ n1=\d+\.\d/s n2=\d+\.\d/s n3=\d+\.\d/s  total=\d+\.\d/s  ceiling=20/s$`)
	if got := len(line.FindAllString(r.stdout, -1)); got < 3 {
		t.Errorf("%d per-second lines, want >= 3:\n%s", got, r.stdout)
	}
	if !strings.Contains(r.stdout, "no window over R*W+B+R*delta (delta 50ms; worst 1s window: ") {
		t.Errorf("verdict:\n%s", r.stdout)
	}
	// The timeline it wrote passes check too.
	mustRun(t, 0, "check", "--rate", "20", "--delta", "50ms", tl)
}

func TestDemo_Interrupt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan result, 1)
	go func() { done <- runCLI(ctx, nil, "demo", "--duration", "1m", "--nodes", "1") }()
	time.Sleep(2 * time.Second)
	cancel()
	select {
	case r := <-done:
		if r.code != 0 && !strings.Contains(r.stderr, "interrupted") {
			t.Errorf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("demo ignored the cancelled context")
	}
}

func TestDemo_BadFlags(t *testing.T) {
	t.Parallel()
	r := runCLI(t.Context(), nil, "demo", "--nodes", "10", "--rate", "0", "--duration", "0s")
	if r.code != 2 {
		t.Fatalf("exit %d", r.code)
	}
	for _, want := range []string{"--nodes 10: must be 1-9", "Rate 0: must be > 0", "--duration 0s: must be positive"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}
