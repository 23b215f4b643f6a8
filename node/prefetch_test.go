package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// A slow key whose callers queue well ahead costs a follower one call to
// the leader per lease: no prefetch after taking a slot that is already
// further away than a prefetch accepts (HorizonAhead/2), since the next
// slot is later still and the prefetch would only be refused. Before, every
// event at 2/s cost two calls.
func TestLeases_NoHopelessPrefetchForASlowKey(t *testing.T) {
	c := nodetest.New(t, 3, func(_ int, cfg *node.Config) { cfg.HorizonAhead = time.Second })
	ctx := context.Background()
	if err := c.Node(c.Leader()).SetLimit(ctx, "slow", fsm.Limit{Rate: 2, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	f := c.Node(c.Followers()[0])
	// The rule holds in every window; retries that a loaded machine adds
	// (a renewal or a horizon commit late) inflate a window's calls too. So
	// the best of three windows is held to the bound: with a prefetch sent
	// after every slot, no window comes near it (two calls per lease).
	best := 0.0
	for attempt := range 3 {
		leases, calls := slowKeyWindow(t, f)
		ratio := float64(calls) / float64(leases)
		t.Logf("window %d: follower: %d leases, %d calls to the leader (%.2f per lease)", attempt+1, leases, calls, ratio)
		if leases < 6 {
			t.Fatalf("only %d leases in 4 s at 2/s", leases)
		}
		if attempt == 0 || ratio < best {
			best = ratio
		}
		if best <= 1.4 {
			return
		}
	}
	t.Errorf("%.2f calls to the leader per lease in the best of three windows: a prefetch that cannot succeed is still sent", best)
}

// slowKeyWindow runs three closed-loop callers of the slow key on f for
// 4 s (its queue runs about 1.5 s ahead) and returns the leases f received
// and the calls it made to the leader meanwhile.
func slowKeyWindow(t *testing.T, f *node.Node) (leases, calls uint64) {
	t.Helper()
	ctx := context.Background()
	before := f.Stats()
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				r, err := f.Reserve(ctx, "slow", 1, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Until(r.At))
			}
		})
	}
	wg.Wait()
	after := f.Stats()
	return after.Leases - before.Leases, after.Forwarded - before.Forwarded
}
