package node_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/nodetest"
)

// Many slow keys, each wanted by one caller on every node of three: each
// node's callers get about a third of the events (issue 15, item 5). The
// leader's own callers, which ask without a network hop, took nearly all
// of them while a member's lease requests waited on the leader 32 at a
// time: 55% here (b5c843b; 90-95% at 2,000 keys), 96-98% in the bench at
// 10,000 keys. With requests of many keys per message (package node/batch),
// queued on the leader first come first served (pacer.awaitShare), each
// node's callers queue beside the others'.
func TestNode_ManySlowKeysAreSharedFairly(t *testing.T) {
	const keys, rate = 1000, 1.0
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 90*time.Second)
	leader := c.Node(c.Leader())
	if err := leader.SetLimit(ctx, "fair:*", fsm.Limit{Rate: rate, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	// Events at slots in [from, to): six seconds from two seconds after
	// every node's callers were first granted, when every key is past its
	// start. The window follows the start rather than a fixed time: on a
	// machine loaded enough (the race detector beside two busy loops, or
	// beside the e2e suite in CI) the first grants to members came 17 s
	// after the limit was set, their share renewals answered too late to
	// count (issue 15's note of 2026-12-07), and a fixed window measured
	// that start, not the shares.
	var (
		mu     sync.Mutex
		slots  = make([][]time.Time, c.Size())
		window atomic.Pointer[[2]time.Time]
	)
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range c.Size() {
		n := c.Node(i)
		for k := range keys {
			key := fmt.Sprintf("fair:%d", k)
			wg.Go(func() {
				for w := window.Load(); w == nil || time.Now().Before(w[1]); w = window.Load() {
					r, err := n.Reserve(ctx, key, 1, 30*time.Second)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("node %d, %s: %v", i, key, err)
						}
						return
					}
					mu.Lock()
					slots[i] = append(slots[i], r.At)
					mu.Unlock()
					time.Sleep(time.Until(r.At))
				}
			})
		}
	}
	for window.Load() == nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		var last time.Time
		all := true
		for i := range slots {
			if len(slots[i]) == 0 {
				all = false
				break
			}
			if first := slices.MinFunc(slots[i], time.Time.Compare); first.After(last) {
				last = first
			}
		}
		mu.Unlock()
		if all {
			t.Logf("every node granted %.1f s after the limit was set", last.Sub(begin).Seconds())
			window.Store(&[2]time.Time{last.Add(2 * time.Second), last.Add(8 * time.Second)})
		}
	}
	wg.Wait()
	w := window.Load()
	if w == nil {
		t.Fatalf("not every node's callers were granted within %v", time.Since(begin))
	}
	counts := make([]int64, c.Size())
	for i := range slots {
		for _, at := range slots[i] {
			if !at.Before(w[0]) && at.Before(w[1]) {
				counts[i]++
			}
		}
	}
	total := int64(0)
	for i := range counts {
		total += counts[i]
	}
	shares := make([]float64, len(counts))
	for i := range counts {
		shares[i] = float64(counts[i]) / float64(total)
	}
	want := float64(keys) * rate * 6
	t.Logf("%d events in 6 s (%.0f%% of %d keys at %v/s); per node (leader %d): %.1f%%", total, 100*float64(total)/want, keys, rate, c.Leader(), pct(shares))
	if float64(total) < 0.8*want {
		t.Errorf("%d events, want at least 80%% of %.0f", total, want)
	}
	for i, s := range shares {
		// A third each; on a loaded machine a member's round trip makes
		// its callers a little later than the leader's.
		if s < 0.25 || s > 0.42 {
			t.Errorf("node %d took %.1f%% of the events; want about a third (25%%-42%%)", i, 100*s)
		}
	}
}

func pct(s []float64) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = 100 * v
	}
	return out
}
