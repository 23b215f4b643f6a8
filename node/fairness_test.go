package node_test

import (
	"fmt"
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
	// Events at slots in [from, to): past the start, when every key is
	// new, and before the callers stop.
	from, to := time.Now().Add(3*time.Second), time.Now().Add(9*time.Second)
	counts := make([]atomic.Int64, c.Size())
	var wg sync.WaitGroup
	for i := range c.Size() {
		n := c.Node(i)
		for k := range keys {
			key := fmt.Sprintf("fair:%d", k)
			wg.Go(func() {
				for time.Now().Before(to) {
					r, err := n.Reserve(ctx, key, 1, 30*time.Second)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("node %d, %s: %v", i, key, err)
						}
						return
					}
					time.Sleep(time.Until(r.At))
					if !r.At.Before(from) && r.At.Before(to) {
						counts[i].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	total := int64(0)
	for i := range counts {
		total += counts[i].Load()
	}
	shares := make([]float64, len(counts))
	for i := range counts {
		shares[i] = float64(counts[i].Load()) / float64(total)
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
