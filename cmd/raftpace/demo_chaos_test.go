package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo_Chaos runs the shortest chaos demo that shows both the kill and
// the restart (12s: kill at t=4s, restart at t=8s) and checks that the
// ceiling held over every event of the run.
func TestDemo_Chaos(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	code := run(ctx, []string{"demo", "--chaos", "--duration", "12s", "--rate", "20"}, &out, &errOut)
	stdout := out.String()
	if code != 0 {
		t.Fatalf("demo --chaos: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, errOut.String())
	}
	for _, want := range []string{"t=4s   CHAOS: killed the leader n", "CHAOS: restarted n", "verdict: OK", "recovery: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	killed := regexp.MustCompile(`CHAOS: killed the leader (n\d)`).FindStringSubmatch(stdout)
	if killed == nil {
		t.Fatalf("no kill:\n%s", stdout)
	}
	victim := killed[1]
	// While it is down its column reads "down", and another node leads.
	down := regexp.MustCompile(`(?m)^t=\d+s\s+ .*` + victim + `=down .* leader=(n\d|none)$`)
	lines := down.FindAllStringSubmatch(stdout, -1)
	if len(lines) < 2 {
		t.Fatalf("%d lines with %s down, want >= 2:\n%s", len(lines), victim, stdout)
	}
	newLeader := ""
	for _, l := range lines {
		if l[1] != "none" && l[1] != victim {
			newLeader = l[1]
		}
	}
	if newLeader == "" {
		t.Errorf("no new leader while %s was down:\n%s", victim, stdout)
	}
	// After the restart the node admits again.
	after := stdout[strings.Index(stdout, "CHAOS: restarted"):]
	if !regexp.MustCompile(`(?m)^t=\d+s\s+ .*` + victim + `=[1-9]\d*\.\d/s`).MatchString(after) {
		t.Errorf("%s admitted nothing after its restart:\n%s", victim, stdout)
	}
}

func TestDemo_ChaosBadDuration(t *testing.T) {
	t.Parallel()
	r := runCLI(t.Context(), nil, "demo", "--chaos", "--duration", "5s")
	if r.code != 2 || !strings.Contains(r.stderr, "--duration 5s: with --chaos must be at least 6s") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}
