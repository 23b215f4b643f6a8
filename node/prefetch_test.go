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
	before := f.Stats()
	// Three closed-loop callers on the follower: the key's queue runs
	// about 1.5 s ahead.
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
	leases, calls := after.Leases-before.Leases, after.Forwarded-before.Forwarded
	t.Logf("follower: %d leases, %d calls to the leader", leases, calls)
	if leases < 6 {
		t.Fatalf("only %d leases in 4 s at 2/s", leases)
	}
	if float64(calls) > 1.4*float64(leases) {
		t.Errorf("%d calls to the leader for %d leases: a prefetch that cannot succeed is still sent", calls, leases)
	}
}
