package node_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
	"github.com/raftpace/raftpace/node/report"
)

// TestNode_DryRunAdmitsAndCounts: a template in dry run at 20/s, offered
// ten times that from the leader and a follower, admits every event at once
// and counts as dry_run_over what the limit had no slot for; its own grants
// stay within the limit, and each node gets a share of them. Set again without dry run, the same load is held
// to the limit (refusals, no more dry-run counts): the twin that shows the
// load would have been over.
func TestNode_DryRunAdmitsAndCounts(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	const key, tmpl = "tenant:7", "tenant:*"
	dry := fsm.Limit{Rate: 20, Burst: 1, DryRun: true}
	nodes := []*node.Node{c.Node(c.Leader()), c.Node(c.Followers()[0])}
	set := func(lim fsm.Limit) {
		t.Helper()
		if err := nodes[1].SetLimit(ctx, tmpl, lim); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			waitFor(t, 5*time.Second, func() bool { got, err := n.Limit(ctx, key); return err == nil && got == lim })
		}
	}
	// counts sums the two nodes' outcomes of the template's row; granted
	// is each node's own count of granted.
	counts := func() (sum map[string]uint64, granted []uint64) {
		sum = map[string]uint64{}
		for _, n := range nodes {
			var g uint64
			for _, k := range n.Metrics().Keys {
				if k.Key == tmpl {
					for o, v := range k.Reservations {
						sum[o] += v
					}
					g = k.Reservations[report.OutcomeGranted]
				}
			}
			granted = append(granted, g)
		}
		return sum, granted
	}
	const phase = 2 * time.Second
	// offer: two callers per node, one Reserve every 5 ms each (800/s in
	// all, 40 times the rate) with maxWait.
	offer := func(maxWait time.Duration) (attempts, admitted, refused int, longest time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(phase)
		for _, n := range nodes {
			for range 2 {
				wg.Go(func() {
					for time.Now().Before(end) {
						begin := time.Now()
						r, err := n.Reserve(ctx, key, 1, maxWait)
						mu.Lock()
						attempts++
						switch {
						case err == nil:
							admitted++
							longest = max(longest, r.At.Sub(begin))
						case errors.Is(err, raftpace.ErrLimitExceeded):
							refused++
						default:
							t.Errorf("Reserve on %s: %v", n.ID(), err)
						}
						mu.Unlock()
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
		}
		wg.Wait()
		return attempts, admitted, refused, longest
	}
	// What the limit may grant in a phase: R*W + B, plus a lease span of
	// slots granted ahead at either end.
	bound := int(dry.Rate*(phase.Seconds()+1)) + dry.Burst

	set(dry)
	attempts, admitted, refused, longest := offer(time.Second)
	got, perNode := counts()
	t.Logf("dry run: %d attempts, %d admitted, %d refused, longest wait %v; counted %v; granted per node (leader, follower) %v", attempts, admitted, refused, longest, got, perNode)
	if attempts < 4*bound {
		t.Fatalf("only %d attempts in %v: the load did not exceed the limit (bound %d)", attempts, phase, bound)
	}
	if admitted != attempts {
		t.Errorf("a limit in dry run admitted %d of %d", admitted, attempts)
	}
	if longest > 250*time.Millisecond {
		t.Errorf("a reservation under a dry run waited %v: a dry run holds nothing back", longest)
	}
	if g := int(got[report.OutcomeGranted]); g > bound {
		t.Errorf("the limit itself granted %d in %v, more than %d", g, phase, bound)
	}
	// Each node offers half the load, so each should see about half the
	// limit's slots: dry_run_over is read per node too.
	for i, g := range perNode {
		if int(g) < bound/5 {
			t.Errorf("node %d had %d of the limit's %d slots: its callers, asking for a slot due now, got no share while the other node's leases kept the cursor ahead", i, g, got[report.OutcomeGranted])
		}
	}
	over := got[report.OutcomeDryRun]
	if int(got[report.OutcomeGranted]+over) != attempts || int(over) < attempts-bound {
		t.Errorf("granted %d + dry_run_over %d, want %d attempts with at least %d over", got[report.OutcomeGranted], over, attempts, attempts-bound)
	}

	enforced := dry
	enforced.DryRun = false
	set(enforced)
	attempts, admitted, refused, _ = offer(0)
	after, _ := counts()
	t.Logf("enforced: %d attempts, %d admitted, %d refused; counted %v", attempts, admitted, refused, after)
	if admitted > bound || refused == 0 {
		t.Errorf("enforced, the same load: %d admitted (bound %d), %d refused", admitted, bound, refused)
	}
	if after[report.OutcomeDryRun] != over {
		t.Errorf("dry_run_over went from %d to %d while the limit was enforced", over, after[report.OutcomeDryRun])
	}
}
