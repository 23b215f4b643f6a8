package pacer

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// manyKeysPacer is a leading pacer with n keys k0..k{n-1} at lim (one
// template), each granted once and its horizon committed: every key has
// recent demand.
func manyKeysPacer(t testing.TB, n int, lim fsm.Limit, clock *int64) *Pacer {
	t.Helper()
	p := New(func() int64 { return *clock }, time.Second, 20*time.Millisecond,
		func(string) (int64, bool) { return 0, false },
		func(string) (fsm.Limit, bool) { return lim, true })
	if !p.Lead(p.StepDown()) {
		t.Fatal("pacer did not lead")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < n; i++ {
		key := fmt.Sprint("k", i)
		p.Lease(cancelled, nil, key, "n1", 1, time.Minute) // makes the key; waits for its horizon
	}
	for {
		ext, ok := p.Collect()
		if !ok {
			break
		}
		p.Committed(ext)
	}
	for i := 0; i < n; i++ {
		if _, err := p.Lease(cancelled, nil, fmt.Sprint("k", i), "n1", 1, time.Minute); err != nil {
			t.Fatalf("k%d after its horizon was committed: %v", i, err)
		}
	}
	return p
}

func entryKeys(ext Extension) map[string]bool {
	keys := make(map[string]bool)
	for _, e := range ext.Cmd.Entries {
		keys[e.Key] = true
	}
	return keys
}

// Between two looks at every key, Collect looks only at the keys a grant
// or a waiting request marked; a key that needs a horizon without being
// marked (an active key whose horizon nears as time passes) is found by
// the next full look, at most ExtendEvery later.
func TestCollect_MarkedKeysAtOnceTheRestAtTheNextFullScan(t *testing.T) {
	var clock int64 = 1e12
	p := manyKeysPacer(t, 100, fsm.Limit{Rate: 1, Burst: 1}, &clock)
	if ext, ok := p.Collect(); ok { // the grants above may have asked for more
		p.Committed(ext)
	}
	p.mu.Lock()
	p.scanned = clock // as if every key was just looked at
	// k1 nears its horizon with no request to mark it; k2 is marked.
	k1 := p.keys["k1"]
	k1.horizon, k1.demand = clock+int64(100*time.Millisecond), clock
	k2 := p.keys["k2"]
	k2.need = k2.horizon + int64(time.Second)
	p.kickKey("k2")
	p.mu.Unlock()

	clock += int64(100 * time.Millisecond)
	ext, _ := p.Collect()
	if got := entryKeys(ext); !got["k2"] || got["k1"] || len(got) != 1 {
		t.Fatalf("between full looks: entries for %v, want only the marked k2", got)
	}
	p.Committed(ext)
	clock += int64(p.ExtendEvery())
	ext, _ = p.Collect()
	if got := entryKeys(ext); !got["k1"] {
		t.Fatalf("after fullScanEvery: entries for %v, want k1 (its horizon is 100ms away)", got)
	}
}

// A slow key's leases do not wait for its horizon: the extension a grant
// asks for already covers the next grant's claim (lookAhead). With the
// look-ahead alone, a key at 1/s claims a second past its cursor, the
// horizon reached a second past it, and every lease but the first waited
// for a raft commit.
func TestLease_SlowKeyNeverWaitsForItsHorizon(t *testing.T) {
	for _, rate := range []float64{0.2, 1, 5} {
		var clock int64 = 1e12
		p := manyKeysPacer(t, 1, fsm.Limit{Rate: rate, Burst: 1}, &clock)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		interval := int64(time.Duration(float64(time.Second) / rate))
		// Three holders in turn, each asking again when its slot comes,
		// the extender committing whatever a grant asks for (as the node
		// does on a kick).
		for i := 0; i < 30; i++ {
			l, err := p.Lease(cancelled, nil, "k0", fmt.Sprint("n", i%3), 1, time.Minute)
			if err != nil {
				t.Fatalf("%v/s, lease %d: %v (it would have waited for a horizon)", rate, i, err)
			}
			for {
				ext, ok := p.Collect()
				if !ok {
					break
				}
				p.Committed(ext)
			}
			clock += max(0, l.Base-interval) // the holders keep a queue about one slot deep
		}
	}
}

// BenchmarkCollect is the extender's look for extensions at 10,000 keys
// with one key marked: "marked" is what a kick costs now, "every-key" what
// it cost when every Collect looked at every key (under the pacer's lock,
// which every grant waits for). The ratio is the figure.
func BenchmarkCollect(b *testing.B) {
	var clock int64 = 1e12
	p := manyKeysPacer(b, 10000, fsm.Limit{Rate: 1, Burst: 1}, &clock)
	for _, full := range []bool{false, true} {
		name := "marked"
		if full {
			name = "every-key"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				p.mu.Lock()
				p.scanned = clock
				if full {
					p.scanned = math.MinInt64 / 2
				}
				p.kickKey("k7")
				p.mu.Unlock()
				p.Collect()
			}
		})
	}
}
