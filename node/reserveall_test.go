package node_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// allKeysLimits: two tenants (by template) under one global limit slower
// than their sum, so that only the global key's grants keep it.
var allKeysLimits = map[string]fsm.Limit{
	"tenant:*": {Rate: 8, Burst: 1},
	"global":   {Rate: 12, Burst: 2},
}

// allKeysLoad runs, on every node, callers that wait for one event of a
// tenant and of "global" together (WaitAll), beside callers of "global"
// alone (served from leases), and returns the events per key. together
// false is the twin: the tenants' callers wait for their tenant only and
// go, as a fleet with one limit per reservation would.
func allKeysLoad(ctx context.Context, t *testing.T, nodes []*node.Node, together bool) []timeline.Event {
	var mu sync.Mutex
	var events []timeline.Event
	record := func(n *node.Node, keys ...string) {
		at := time.Now().UnixNano()
		mu.Lock()
		for _, k := range keys {
			events = append(events, timeline.Event{At: at, Node: n.ID(), Key: k})
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	caller := func(n *node.Node, wait func(*client.Client) error, keys ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client.New(n)
			for ctx.Err() == nil {
				if err := wait(cl); err != nil {
					if ctx.Err() == nil && !errors.Is(err, raftpace.ErrLimitExceeded) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("wait on %s: %v", n.ID(), err)
					}
					return
				}
				record(n, keys...)
			}
		}()
	}
	for _, n := range nodes {
		for _, tenant := range []string{"tenant:a", "tenant:b"} {
			for range 2 {
				if together {
					caller(n, func(cl *client.Client) error {
						return cl.WaitAll(ctx, client.Want{Key: tenant, Count: 1}, client.Want{Key: "global", Count: 1})
					}, tenant, "global")
				} else {
					caller(n, func(cl *client.Client) error { return cl.Wait(ctx, tenant) }, tenant, "global")
				}
			}
		}
		caller(n, func(cl *client.Client) error { return cl.Wait(ctx, "global") }, "global")
	}
	wg.Wait()
	sort.Slice(events, func(i, j int) bool { return events[i].At < events[j].At })
	return events
}

func allKeysCluster(t *testing.T) (*nodetest.Cluster, context.Context) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	for k, lim := range allKeysLimits {
		if err := c.Node(0).SetLimit(ctx, k, lim); err != nil {
			t.Fatal(err)
		}
	}
	return c, ctx
}

// An event that reserves a tenant and the global key together holds both
// limits, from every node, beside callers of the global key alone; and
// those alone do not starve the callers of two keys.
func TestNode_ReserveAllHoldsEveryKey(t *testing.T) {
	c, ctx := allKeysCluster(t)
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	events := allKeysLoad(runCtx, t, []*node.Node{c.Node(0), c.Node(1), c.Node(2)}, true)
	global := checkCeiling(t, events, "global", allKeysLimits["global"], 0.6)
	for _, tenant := range []string{"tenant:a", "tenant:b"} {
		rep := checkCeiling(t, events, tenant, allKeysLimits["tenant:*"], 0)
		// A fair third of the global rate is 4/s; a quarter of it over the
		// run's 4 s is the floor that says the tenant was not starved.
		if rep.Events < 4 {
			t.Errorf("%s admitted %d events in 4s beside the global key's own callers: starved", tenant, rep.Events)
		}
	}
	if global.Events == 0 {
		t.Fatal("no global events: the run proves nothing")
	}
}

// The twin: the same load with each event reserving its tenant only goes
// over the global limit, so the test above can fail.
func TestNode_ReserveAllHoldsEveryKey_Twin(t *testing.T) {
	c, ctx := allKeysCluster(t)
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	events := allKeysLoad(runCtx, t, []*node.Node{c.Node(0), c.Node(1), c.Node(2)}, false)
	lim := allKeysLimits["global"]
	rep := timeline.Check(events, "global", timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
		Windows: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
		Delta:   nodeUseGrace,
	})
	t.Log(rep.String())
	if rep.OK() {
		t.Fatal("the global key held its limit with no reservation of it: the check cannot fail")
	}
}

// A reservation of several keys is all or nothing, on the leader and
// through a follower: a refusal names the key that refused and consumes
// nothing of the others.
func TestNode_ReserveAllNoneOrAll(t *testing.T) {
	c, ctx := allKeysCluster(t)
	for _, i := range []int{c.Leader(), c.Followers()[0]} {
		n := c.Node(i)
		tenant := "tenant:" + n.ID()
		if _, err := n.Reserve(ctx, "global", 2, 5*time.Second); err != nil { // the burst: the next is 1/6 s away
			t.Fatal(err)
		}
		_, err := n.ReserveAll(ctx, []raftpace.Want{{Key: tenant, Count: 1}, {Key: "global", Count: 1}}, 0)
		var le *raftpace.LimitExceededError
		if !errors.As(err, &le) || le.Key != "global" {
			t.Fatalf("%s: with global spent: %v; want a LimitExceededError naming global", n.ID(), err)
		}
		_, err = n.ReserveAll(ctx, []raftpace.Want{{Key: tenant, Count: 1}, {Key: "nope", Count: 1}}, time.Second)
		if !errors.Is(err, raftpace.ErrUnknownKey) {
			t.Fatalf("%s: with an unknown key: %v", n.ID(), err)
		}
		// Neither refusal took the tenant's one slot.
		if _, err := n.Reserve(ctx, tenant, 1, 0); err != nil {
			t.Fatalf("%s: the tenant's slot after two refusals: %v", n.ID(), err)
		}
		for _, bad := range [][]raftpace.Want{
			nil,
			{{Key: "global", Count: 1}, {Key: "global", Count: 1}},
			{{Key: tenant, Count: 0}},
			{{Key: "tenant:*", Count: 1}},
		} {
			if _, err := n.ReserveAll(ctx, bad, 0); !errors.Is(err, raftpace.ErrInvalidRequest) {
				t.Errorf("%s: ReserveAll(%v) = %v; want ErrInvalidRequest", n.ID(), bad, err)
			}
		}
		time.Sleep(500 * time.Millisecond) // the global burst refills
	}
}
