package bench

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/timeline"
)

// paced returns n events of key, one every interval from start, spread
// round-robin over nodes.
func paced(key string, start int64, interval time.Duration, n int, nodes ...string) []timeline.Event {
	var evs []timeline.Event
	for i := range n {
		evs = append(evs, timeline.Event{At: start + int64(i)*int64(interval), Node: nodes[i%len(nodes)], Key: key})
	}
	return evs
}

func TestAnalyzeCeiling(t *testing.T) {
	t.Parallel()
	const start = int64(1_700_000_000_000_000_000)
	lim := client.Limit{Rate: 100, Burst: 1}
	loads := []*KeyLoad{
		{Rate: 100, From: start, To: start + 5e9, Shed: 10, ShedQueue: 4},
		{Rate: 100, From: start + 2e8, To: start + 5e9, Shed: 20},
		{Rate: 100, From: start + 1e8, To: start + 4.9e9},
	}
	// Paced exactly at the ceiling, across 3 nodes, other keys ignored.
	evs := paced("k", start, 10*time.Millisecond, 500, "n1", "n2", "n3")
	evs = append(evs, paced("other", start, time.Millisecond, 5000, "n1")...)
	res := analyzeCeiling(evs, "k", lim, loads)
	if res.WindowsOver != 0 || len(res.Windows) != 4 {
		t.Errorf("paced: %+v", res.Windows)
	}
	// Steady interval: 1s after the last start (0.2s) to the first stop (4.9s).
	if res.Seconds < 3.69 || res.Seconds > 3.71 || res.AdmittedPct < 99.5 || res.AdmittedPct > 100.5 {
		t.Errorf("paced: %.3fs, %.2f%%", res.Seconds, res.AdmittedPct)
	}
	if res.Offered != 300 || res.Shed != 30 || res.ShedQueue != 4 || res.Events != 500 {
		t.Errorf("paced counts: %+v", res)
	}
	// 50 buckets of 100ms over [start, start+5s); 1 event per 10ms is
	// 100/s once the trailing second is full, and also before (the
	// average is over the buckets so far).
	if len(res.Series) != 50 || res.Series[0] != 100 || res.Series[25] != 100 {
		t.Errorf("series %v", res.Series)
	}

	// Three processes each pacing alone at the rate: 3x, over at every length.
	var solo []timeline.Event
	for i, n := range []string{"n1", "n2", "n3"} {
		solo = append(solo, paced("k", start+int64(i)*3e6, 10*time.Millisecond, 500, n)...)
	}
	res = analyzeCeiling(solo, "k", lim, loads)
	if res.WindowsOver != 4 || res.AdmittedPct < 290 || res.AdmittedPct > 310 {
		t.Errorf("solo: %.1f%%, %d over", res.AdmittedPct, res.WindowsOver)
	}
	if w := res.Window(time.Second); w == nil || w.Max < 290 || w.Bound != 106 {
		t.Errorf("solo 1s window: %+v", w)
	}
}

func TestAdmittedSeries(t *testing.T) {
	t.Parallel()
	const start = int64(1e18)
	// 3 events in the first bucket, none after: the trailing average.
	evs := []timeline.Event{{At: start, Node: "a", Key: "k"}, {At: start + 5e7, Node: "a", Key: "k"}, {At: start + 99e6, Node: "a", Key: "k"},
		{At: start + 2e9, Node: "a", Key: "k"}} // at the end: excluded
	s := admittedSeries(evs, "k", start, start+2e9)
	if len(s) != 20 {
		t.Fatalf("%d buckets", len(s))
	}
	// Bucket 0: 3 events in 0.1s = 30/s; bucket 1: 3 in 0.2s = 15/s;
	// bucket 9: 3 in 1s; bucket 10 on: the first bucket left the window.
	if s[0] != 30 || s[1] != 15 || s[9] != 3 || s[10] != 0 || s[19] != 0 {
		t.Errorf("series %v", s)
	}
	if admittedSeries(evs, "k", start, start) != nil {
		t.Error("empty interval gives a series")
	}
}
