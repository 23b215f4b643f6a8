package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// A leader that leaves hands over at its exact cursors: the successor
// grants on at once instead of starting at the horizon committed ahead of
// need. With HorizonAhead 3s, starting at the horizon would leave a gap of
// up to 3s in grants; the hand-over leaves one of a commit and an
// election by TimeoutNow (the bound below allows for a loaded machine).
// The departed leader's fraction comes back at once: the two left admit
// the full rate.
func TestChurn_LeaderLeavesWithoutAGap(t *testing.T) {
	c := nodetest.New(t, 3, func(_ int, cfg *node.Config) { cfg.HorizonAhead = 3 * time.Second })
	ctx := nodetest.Ctx(t, 60*time.Second)
	const rate = 40
	if err := c.Node(0).SetLimit(ctx, "k", fsm.Limit{Rate: rate, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader()
	var (
		mu    sync.Mutex
		times []time.Time
	)
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, i := range c.Followers() {
		n := c.Node(i)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for loadCtx.Err() == nil {
					r, err := n.Reserve(loadCtx, "k", 1, time.Second)
					if err != nil {
						if !errors.Is(err, raftpace.ErrLimitExceeded) && !errors.Is(err, raftpace.ErrNoLeader) && loadCtx.Err() == nil {
							time.Sleep(5 * time.Millisecond)
						}
						continue
					}
					time.Sleep(r.Delay())
					mu.Lock()
					times = append(times, time.Now())
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(2 * time.Second)
	left := time.Now()
	if err := c.Node(leader).Leave(ctx); err != nil {
		t.Fatalf("leader leave: %v", err)
	}
	c.Kill(leader)
	t.Logf("leader left in %v", time.Since(left))
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var gap time.Duration
	after := 0
	for i := 1; i < len(times); i++ {
		if times[i].After(left.Add(-time.Second)) && times[i].Before(left.Add(3*time.Second)) {
			gap = max(gap, times[i].Sub(times[i-1]))
		}
		if times[i].After(left.Add(time.Second)) {
			after++
		}
	}
	rateAfter := float64(after) / (time.Since(left).Seconds() - 1 - time.Since(times[len(times)-1]).Seconds())
	t.Logf("longest gap between admitted events around the hand-over: %v; rate from 1s after it: %.1f/s of %d", gap, rateAfter, rate)
	if gap > 1500*time.Millisecond {
		t.Errorf("gap in grants around the hand-over %v: the successor did not start at the cursors", gap)
	}
	if rateAfter < 0.8*rate {
		t.Errorf("rate after the leader left %.1f/s < 80%% of %d: its fraction did not come back", rateAfter, rate)
	}
}
