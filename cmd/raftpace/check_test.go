package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// writePaced writes one timeline per node. In "shared" mode the nodes take
// turns in one sequence paced at rate (what a working cluster produces); in
// "solo" mode each node paces alone at rate (coordination off).
func writePaced(t *testing.T, dir, mode string, nodes int, rate float64, d time.Duration) []string {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	interval := int64(float64(time.Second) / rate)
	perNode := make([][]timeline.Event, nodes)
	count := int(float64(d) / float64(interval))
	for i := range count {
		if mode == "shared" {
			n := i % nodes
			perNode[n] = append(perNode[n], timeline.Event{At: t0 + int64(i)*interval, Node: fmt.Sprintf("n%d", n+1), Key: "k"})
			continue
		}
		for n := range nodes {
			// Each node on its own schedule, slightly offset.
			at := t0 + int64(i)*interval + int64(n)*interval/int64(nodes)
			perNode[n] = append(perNode[n], timeline.Event{At: at, Node: fmt.Sprintf("n%d", n+1), Key: "k"})
		}
	}
	var paths []string
	for n, evs := range perNode {
		p := filepath.Join(dir, fmt.Sprintf("%s-n%d.timeline", mode, n+1))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := timeline.WriteEvents(f, evs); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestCheck_Pass(t *testing.T) {
	t.Parallel()
	files := writePaced(t, t.TempDir(), "shared", 3, 20, 10*time.Second)
	r := mustRun(t, 0, append([]string{"check", "--rate", "20"}, files...)...)
	for _, want := range []string{
		"200 event(s) in 3 file(s); limit 20/s burst 1; bound R*W+B+R*50ms",
		"key=k events=200 rate=20.00/s (100.0% of 20) nodes: n1=67 n2=67 n3=66",
		"OK: no window over R*W+B+R*50ms",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	// 20 or 21: whether a window's end is in it is the timeline package's call.
	if !regexp.MustCompile(`W=1s max=2[01] bound=22.00 ok`).MatchString(r.stdout) {
		t.Errorf("1s window:\n%s", r.stdout)
	}
	// Flags after the files, --key, custom windows, delta.
	args := append(append([]string{"check"}, files...), "--rate", "20")
	if r := mustRun(t, 0, args...); !strings.Contains(r.stdout, "OK: no window over R*W+B+R*50ms") {
		t.Errorf("flags after files:\n%s", r.stdout)
	}
	r = mustRun(t, 0, append([]string{"check", "--key", "k", "--window", "250ms,3", "--delta", "50ms", "--rate", "20"}, files...)...)
	if !regexp.MustCompile(`W=250ms max=[56] bound=7.00 ok\n  W=3s max=6[01] bound=62.00 ok`).MatchString(r.stdout) {
		t.Errorf("custom windows:\n%s", r.stdout)
	}
}

func TestCheck_Over(t *testing.T) {
	t.Parallel()
	files := writePaced(t, t.TempDir(), "solo", 3, 20, 5*time.Second)
	r := mustRun(t, 1, append([]string{"check", "--rate", "20", "--burst", "1", "--delta", "0"}, files...)...)
	if !regexp.MustCompile(`W=1s max=6[01] bound=21.00 OVER at `).MatchString(r.stdout) || !strings.Contains(r.stdout, `FAIL: ceiling exceeded for key "k"`) {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, `raftpace: check: ceiling exceeded for key "k"`) {
		t.Errorf("stderr: %s", r.stderr)
	}

	// --json: the same verdict, machine-readable.
	r = mustRun(t, 1, append([]string{"check", "--rate", "20", "--json"}, files...)...)
	var out checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	if out.OK || len(out.Keys) != 1 || out.Keys[0].OK || out.Keys[0].Events != 300 || len(out.Keys[0].Windows) != 4 ||
		!out.Keys[0].Windows[1].Over || out.Keys[0].Windows[1].MaxCount < 60 || out.Keys[0].PerNode["n2"] != 100 {
		t.Errorf("--json: %+v", out)
	}

	// One process's file alone is within its bound.
	mustRun(t, 0, "check", "--rate", "20", files[0])
}

func TestCheck_Errors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.timeline")
	if err := os.WriteFile(bad, []byte("1 n1 k\nnot a line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.timeline")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"check", empty}, 2, "--rate is required"},
		{[]string{"check", "--rate", "x", empty}, 2, `--rate: invalid number "x"`},
		{[]string{"check", "--rate", "0", empty}, 2, "raftpace check: --rate 0: must be > 0"},
		{[]string{"check", "--rate", "5", "--burst", "0", empty}, 2, "--burst 0: must be >= 1"},
		{[]string{"check", "--rate", "5", "--window", "1s,-2s", empty}, 2, `window "-2s": must be positive`},
		{[]string{"check", "--rate", "5", "--window", "soon", empty}, 2, `"soon": not a duration`},
		{[]string{"check", "--rate", "5"}, 2, "at least one timeline FILE is required"},
		{[]string{"check", "--rate", "5", filepath.Join(dir, "missing")}, 1, "no such file or directory"},
		{[]string{"check", "--rate", "5", bad}, 1, "bad.timeline"},
		{[]string{"check", "--rate", "5", empty}, 0, "warning: no events in 1 file(s)"},
		{[]string{"check", "--rate", "5", "--key", "k", empty}, 0, `warning: no events for key "k"`},
	}
	for _, tc := range tests {
		r := runCLI(t.Context(), nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("raftpace %q: exit %d stderr:\n%s\nwant exit %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

// A file ending in a torn line (an agent killed while recording) is
// checked, with a note naming it; a torn line holding a whole event counts,
// also for the key its possibly cut-short key is the start of.
func TestCheck_TornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n1 := write("n1.timeline", "1000000000 n1 key\n")
	dropped := write("dropped.timeline", "100000000 n2 key\n1000000001 n2")
	cut := write("cut.timeline", "100000000 n2 key\n1000000001 n2 ke")

	r := mustRun(t, 0, "check", "--rate", "1", "--window", "500ms", "--key", "key", n1, dropped)
	if want := "raftpace: check: note: timeline: " + dropped + ": line 2: torn last line (13 bytes"; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "dropped") {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	r = mustRun(t, 1, "check", "--rate", "1", "--window", "500ms", "--key", "key", n1, cut)
	for _, want := range []string{
		"raftpace: check: note: timeline: " + cut + ": line 2: torn last line (16 bytes",
		`counted as the event "1000000001 n2 ke"`,
		`its key may have been cut short: counted for key "key" too`,
		`ceiling exceeded for key "key"`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}
