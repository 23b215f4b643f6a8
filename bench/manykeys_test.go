package bench

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/client"
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
	// k0 has 18 events, k1 9, k2 none; (9 + 9 + 8.7) s x 2/s = 53.4; the
	// shortest interval is k2's, 8.7 s.
	if res.Seconds < 8.69 || res.Seconds > 8.71 || res.Events != 27 || res.AdmittedPct < 50.5 || res.AdmittedPct > 50.6 {
		t.Errorf("interval: %.2f s, %d events, %.2f%%", res.Seconds, res.Events, res.AdmittedPct)
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
