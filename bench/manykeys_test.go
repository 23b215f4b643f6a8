package bench

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/timeline"
)

func TestAnalyzeManyKeys(t *testing.T) {
	t.Parallel()
	const start = int64(1_700_000_000_000_000_000)
	lim := client.Limit{Rate: 2, Burst: 1}
	keys := manyKeysNames(3)
	load := func(from, to int64) *KeyLoad { return &KeyLoad{Concurrency: 1, From: from, To: to} }
	// Key loads start at different times on each agent (their limits
	// registered one by one): each key's steady interval is from 1 s after
	// its last start to its first stop: k0 [1 s, 10 s), k1 [1.1 s, 10.1 s),
	// k2 [1.5 s, 10.2 s).
	reps := []*LoadReport{
		{Node: "n1", Keys: map[string]*KeyLoad{"k0": load(start, start+10e9), "k1": load(start+1e8, start+10.1e9), "k2": load(start+2e8, start+10.2e9)}},
		{Node: "n2", Keys: map[string]*KeyLoad{"k0": load(start, start+10e9), "k1": load(start+1e8, start+10.1e9), "k2": load(start+5e8, start+10.5e9)}},
	}
	// k0 paced at the rate across both nodes, k1 at half of it, k2 never
	// admitted; other keys ignored.
	evs := paced("k0", start, 500*time.Millisecond, 21, "n1", "n2")
	evs = append(evs, paced("k1", start, time.Second, 11, "n2")...)
	evs = append(evs, paced("other", start, time.Millisecond, 5000, "n1")...)
	res := analyzeManyKeys(evs, keys, lim, reps)
	// k0 has 18 events of 18 slots, k1 9 of 18 (its grid runs from its
	// event at 1 s), k2 none of 18 (from 1.5 s to 10.2 s); the shortest
	// interval is k2's, 8.7 s. Against rate x interval: 27 of 53.4.
	if res.Seconds < 8.69 || res.Seconds > 8.71 || res.Events != 27 || res.AdmittedPct != 50 {
		t.Errorf("interval: %.2f s, %d events, %.2f%%", res.Seconds, res.Events, res.AdmittedPct)
	}
	if res.AdmittedPctOfSpan < 50.5 || res.AdmittedPctOfSpan > 50.6 {
		t.Errorf("of the span: %.2f%%", res.AdmittedPctOfSpan)
	}
	if res.WorstKey != "k2" || res.WorstPct != 0 || res.Below95 != 2 || res.Idle != 1 || res.WindowsOver != 0 || res.Keys != 3 {
		t.Errorf("per key: %+v", res)
	}

	// k0 admitted by both nodes each at the rate: twice the bound.
	evs = append(paced("k0", start, 500*time.Millisecond, 21, "n1"), paced("k0", start+1e6, 500*time.Millisecond, 21, "n2")...)
	res = analyzeManyKeys(evs, keys, lim, reps)
	if res.WindowsOver != 4 || res.WorstKey != "k1" || res.Idle != 2 {
		t.Errorf("over: %+v", res)
	}
}

// A key paced at exactly its rate admits 100% of its slots, wherever its
// interval ends against its slots; rate x interval made it 94.5% here
// (a slot 10 ms before its start, the next 5 ms past its end). A slot lost is counted: the key's later
// events come after the grid's points.
func TestAnalyzeManyKeys_CountsSlotsNotSpan(t *testing.T) {
	t.Parallel()
	const start = int64(1_700_000_000_000_000_000)
	lim := client.Limit{Rate: 1, Burst: 1}
	keys := []string{"k0"}
	// The key's slots fall 10 ms past each second; the load of the
	// agent that started last ran [20 ms, 19.005 s), so the steady
	// interval [1.02 s, 19.005 s) holds 17.985 s and 17 slots (2.01 ...
	// 18.01 s).
	reps := []*LoadReport{{Node: "n1", Keys: map[string]*KeyLoad{"k0": {Concurrency: 1, From: start + 2e7, To: start + 19.005e9}}}}
	evs := paced("k0", start+1e7, time.Second, 25, "n1") // on to 24.01 s
	res := analyzeManyKeys(evs, keys, lim, reps)
	if res.AdmittedPct != 100 || res.Below95 != 0 || res.WorstPct != 100 {
		t.Errorf("paced at the rate: %.2f%%, worst %.2f%%, %d below 95%%", res.AdmittedPct, res.WorstPct, res.Below95)
	}
	if res.AdmittedPctOfSpan > 95 {
		t.Errorf("of the span: %.2f%%, the end's cut showed nothing", res.AdmittedPctOfSpan)
	}

	// One slot lost at 5.01 s: the key goes on from 6.02 s (the next
	// grant came at once), one event short.
	var lost []timeline.Event
	for _, e := range evs {
		switch {
		case e.At < start+5e9:
			lost = append(lost, e)
		case e.At > start+6e9:
			e.At += 1e7
			lost = append(lost, e)
		}
	}
	res = analyzeManyKeys(lost, keys, lim, reps)
	if res.Events != 16 || res.AdmittedPct > 95 || res.AdmittedPct < 94 {
		t.Errorf("a slot lost: %d events, %.2f%%", res.Events, res.AdmittedPct)
	}
}
