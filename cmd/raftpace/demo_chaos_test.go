package main

import (
	"strings"
	"testing"
)

func TestDemo_ChaosBadDuration(t *testing.T) {
	t.Parallel()
	r := runCLI(t.Context(), nil, "demo", "--chaos", "--duration", "5s")
	if r.code != 2 || !strings.Contains(r.stderr, "--duration 5s: with --chaos must be at least 6s") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}
