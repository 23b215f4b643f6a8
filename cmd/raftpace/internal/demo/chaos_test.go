package demo

import (
	"bytes"
	"context"
	"regexp"
	"slices"
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
	for _, want := range []string{"t=4s   CHAOS: killed the leader n", "CHAOS: restarted n", "verdict: OK", "recovery (the first full second of the table at >= 90%"} {
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

// Recovery is the first full second of the table at the pace, as the
// table shows it: a burst that fills a sliding 1 s window earlier does not
// count.
func TestRecoveredSecond(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	var times []int64
	add := func(from time.Duration, n int, every time.Duration) {
		for i := range n {
			times = append(times, start.Add(from+time.Duration(i)*every).UnixNano())
		}
	}
	// Second 3 (2s..3s): 2 events; second 4: a burst of 8 from 3.6s and
	// one at 3.99s (9); second 5: 4; second 6: 10. A sliding window from
	// 3.6s holds 13, but the first full second at 10 is the 6th.
	add(2*time.Second, 2, 400*time.Millisecond)
	add(3600*time.Millisecond, 8, 50*time.Millisecond)
	add(3990*time.Millisecond, 1, 0)
	add(4050*time.Millisecond, 4, 100*time.Millisecond)
	add(5*time.Second, 10, 100*time.Millisecond)
	slices.Sort(times)
	killed := start.Add(2500 * time.Millisecond)
	k, d, ok := recoveredSecond(times, start, killed, start.Add(7*time.Second), 10)
	if !ok || k != 6 || d != 3500*time.Millisecond {
		t.Errorf("recoveredSecond = %d, %v, %v; want second 6, 3.5s after the kill", k, d, ok)
	}
	if _, _, ok := recoveredSecond(times, start, killed, start.Add(5500*time.Millisecond), 10); ok {
		t.Error("recovered in a second that ends after end")
	}
}
