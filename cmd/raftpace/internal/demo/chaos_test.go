package demo

import (
	"bytes"
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
	var out, errOut bytes.Buffer
	cfg := Config{Rate: 20, Burst: 1, Nodes: 3, Duration: 12 * time.Second, Concurrency: 4, Key: "demo", Chaos: true}
	ok, err := Run(ctx, cfg, &out, &errOut)
	stdout := out.String()
	if !ok || err != nil {
		t.Fatalf("chaos demo: ok %v, err %v\nstdout:\n%s\nstderr:\n%s", ok, err, stdout, errOut.String())
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

func TestRecoveryAfter(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	var times []int64
	// 2/s for 3s, then 10/s for 3s.
	for i := range 6 {
		times = append(times, base.Add(time.Duration(i)*500*time.Millisecond).UnixNano())
	}
	for i := range 30 {
		times = append(times, base.Add(3*time.Second+time.Duration(i)*100*time.Millisecond).UnixNano())
	}
	d, ok := recoveryAfter(times, base, base.Add(6*time.Second), 9)
	if !ok || d != 3*time.Second {
		t.Errorf("recoveryAfter = %v, %v; want 3s, true", d, ok)
	}
	if _, ok := recoveryAfter(times, base, base.Add(3*time.Second), 9); ok {
		t.Error("recovered in a window that ends after end")
	}
}
