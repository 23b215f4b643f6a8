package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// quotaLimit: a rate that would spend the quota in 3 s, so a run of 6 s
// with a leader killed at 1.5 s meets the quota, not the rate. A day, so a
// run almost never crosses a window (once in 14,400 runs of 6 s).
var quotaLimit = fsm.Limit{Rate: 40, Burst: 4, Quota: 120, Per: fsm.PerDay}

// quotaLoad runs callers on every node (single events from leases, and
// reservations of two events) until ctx ends, kills the leader after
// killAt, and returns the events admitted per day window and the
// refusals that named the quota.
func quotaLoad(t *testing.T, fresh bool) (perDay map[int64]int, exhausted int, c *nodetest.Cluster) {
	c = nodetest.New(t, 3, func(_ int, cfg *node.Config) { cfg.Unsafe.FreshStart = fresh })
	ctx := nodetest.Ctx(t, 60*time.Second)
	if err := c.Node(0).SetLimit(ctx, "q", quotaLimit); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	var mu sync.Mutex
	perDay = map[int64]int{}
	var spent atomic.Int64
	record := func(at time.Time, n int) {
		start, _ := fsm.PerDay.Window(at)
		mu.Lock()
		perDay[start.Unix()] += n
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		n := c.Node(i)
		for w := 0; w < 3; w++ {
			count := 1 + w%2
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := client.New(n)
				for runCtx.Err() == nil {
					err := cl.WaitN(runCtx, "q", count)
					switch {
					case err == nil:
						record(time.Now(), count)
					case errors.Is(err, raftpace.ErrQuotaExhausted):
						spent.Add(1)
						var qe *raftpace.QuotaExhaustedError
						if !errors.As(err, &qe) || qe.Key != "q" || time.Until(qe.Reset) <= 0 {
							t.Errorf("quota refusal %v: want a QuotaExhaustedError for q resetting later", err)
						}
						sleepCtx(runCtx, 50*time.Millisecond)
					case runCtx.Err() != nil || errors.Is(err, raftpace.ErrClosed):
						return
					default:
						sleepCtx(runCtx, 10*time.Millisecond) // a leader change
					}
				}
			}()
		}
	}
	time.Sleep(1500 * time.Millisecond)
	c.Kill(c.Leader())
	wg.Wait()
	return perDay, int(spent.Load()), c
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// A quota holds across a leader's kill: the new leader starts at the
// count the old one committed, so no day passes its quota, while the
// quota (not the rate) ends the run; and a follower reads what is left.
func TestNode_QuotaHoldsAcrossLeaderKill(t *testing.T) {
	perDay, exhausted, c := quotaLoad(t, false)
	total := 0
	for start, n := range perDay {
		t.Logf("day from %s: %d events (quota %d); %d refusals named the quota", time.Unix(start, 0).UTC().Format(time.TimeOnly), n, quotaLimit.Quota, exhausted)
		if int64(n) > quotaLimit.Quota {
			t.Fatalf("the day from %s admitted %d events: quota %d", time.Unix(start, 0).UTC(), n, quotaLimit.Quota)
		}
		total += n
	}
	// A leader change may lose the part of a committed batch the old
	// leader had not granted (about one look-ahead of the rate: 300ms of
	// 40/s here, plus the burst); the quota must still have ended the run.
	if exhausted == 0 || total < 60 {
		t.Fatalf("%d events, %d refusals naming the quota: the quota did not end the run", total, exhausted)
	}
	ctx := nodetest.Ctx(t, 10*time.Second)
	for _, i := range []int{c.Leader(), c.Followers()[0]} {
		rem, err := c.Node(i).Remaining(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		_, reset := fsm.PerDay.Window(time.Now())
		if rem.Quota != 120 || rem.Per != "day" || rem.Used < int64(total) || rem.Left != rem.Quota-rem.Used || !rem.Reset.Equal(reset) {
			t.Fatalf("Remaining on %s = %+v: want quota 120 per day, at least the %d events admitted used, reset %s", c.Node(i).ID(), rem, total, reset)
		}
	}
	var counted uint64 // the refusals the nodes' metrics count as the quota's
	for _, i := range []int{c.Leader(), c.Followers()[0]} {
		for _, k := range c.Node(i).Metrics().Keys {
			if k.Key == "q" {
				counted += k.Reservations["quota_exhausted"]
			}
		}
	}
	if counted == 0 {
		t.Errorf("no reservation counted as quota_exhausted in the metrics, after %d refusals", exhausted)
	}
	if _, err := c.Node(c.Followers()[0]).Remaining(ctx, "nope"); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("Remaining of an unknown key: %v", err)
	}
}

// The twin: a new leader that starts the count at 0 (Unsafe.FreshStart)
// passes the quota, so the check above can fail.
func TestNode_QuotaHoldsAcrossLeaderKill_Twin(t *testing.T) {
	perDay, _, _ := quotaLoad(t, true)
	for start, n := range perDay {
		if int64(n) > quotaLimit.Quota {
			t.Logf("the day from %s admitted %d events against a quota of %d: caught", time.Unix(start, 0).UTC().Format(time.TimeOnly), n, quotaLimit.Quota)
			return
		}
	}
	t.Fatalf("a new leader that forgets the count kept every day within its quota (%v): the check cannot fail", perDay)
}
