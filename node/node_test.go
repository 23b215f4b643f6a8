package node_test

import (
	"context"
	"errors"
	"math"
	"sort"
	"strings"
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

func TestConfig_ReportsEveryProblem(t *testing.T) {
	_, err := node.New(node.Config{
		NodeID:         "has space",
		BindAddr:       "nope",
		GossipBindAddr: "127.0.0.1:99999",
		Voters:         9,
		HorizonAhead:   time.Hour,
	})
	if !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("got %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"NodeID", "DataDir", "BindAddr", "GossipBindAddr", "Voters", "HorizonAhead"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
}

// load runs callers goroutines per node calling client.Wait on key until
// ctx ends and returns every admitted event.
func load(ctx context.Context, t *testing.T, nodes []*node.Node, key string, callers int) []timeline.Event {
	t.Helper()
	var mu sync.Mutex
	var events []timeline.Event
	var wg sync.WaitGroup
	for _, n := range nodes {
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := client.New(n)
				for ctx.Err() == nil {
					if err := cl.Wait(ctx, key); err != nil {
						// Near the end of the run a wait would pass ctx's
						// deadline: Wait sheds it at once, as documented.
						if ctx.Err() == nil && !errors.Is(err, raftpace.ErrClosed) && !errors.Is(err, raftpace.ErrLimitExceeded) && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("wait on %s: %v", n.ID(), err)
						}
						return
					}
					mu.Lock()
					events = append(events, timeline.Event{At: time.Now().UnixNano(), Node: n.ID(), Key: key})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	sort.Slice(events, func(i, j int) bool { return events[i].At < events[j].At })
	return events
}

const nodeUseGrace = 50 * time.Millisecond // node.Config's default

// minUtil is the utilisation these short in-process runs must reach. They
// run under -race on a shared 2-core machine, where late wake-ups forfeit
// slots; the real-process tests (e2e) hold the 95% bar.
const minUtil = 0.90

func checkCeiling(t *testing.T, events []timeline.Event, key string, lim fsm.Limit, minUtil float64) timeline.KeyReport {
	t.Helper()
	rep := timeline.Check(events, key, timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
		Windows: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
		// The ceiling's delta is the nodes' UseGrace: a slot is used no
		// later than that after the leader meant it, or forfeited.
		Delta: nodeUseGrace,
	})
	t.Log(rep.String())
	if !rep.OK() {
		t.Errorf("ceiling exceeded:\n%s", rep.String())
	}
	if rep.Utilisation < minUtil {
		t.Errorf("utilisation %.3f, want at least %.2f", rep.Utilisation, minUtil)
	}
	return rep
}

func TestNode_SingleNodePaces(t *testing.T) {
	c := nodetest.New(t, 1)
	n := c.Node(0)
	ctx := nodetest.Ctx(t, 30*time.Second)
	lim := fsm.Limit{Rate: 50, Burst: 1}
	if err := n.SetLimit(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	events := load(runCtx, t, []*node.Node{n}, "k", 4)
	checkCeiling(t, events, "k", lim, minUtil)
}

func TestNode_ThreeNodesShareOneRate(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	lim := fsm.Limit{Rate: 40, Burst: 2}
	f := c.Followers()[0]
	// A limit set through a follower is readable on that follower at once.
	if err := c.Node(f).SetLimit(ctx, "shared", lim); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Node(f).Limit(ctx, "shared"); err != nil || got != lim {
		t.Fatalf("limit on follower after set: %v, %v", got, err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	nodes := []*node.Node{c.Node(0), c.Node(1), c.Node(2)}
	events := load(runCtx, t, nodes, "shared", 3)
	rep := checkCeiling(t, events, "shared", lim, minUtil)
	for _, n := range nodes {
		if rep.PerNode[n.ID()] == 0 {
			t.Errorf("node %s admitted nothing", n.ID())
		}
	}
}

func TestNode_ReserveShedsPastMaxWait(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 30*time.Second)
	lim := fsm.Limit{Rate: 1, Burst: 1}
	if err := c.Node(0).SetLimit(ctx, "slow", lim); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{c.Leader(), c.Followers()[0]} {
		n := c.Node(i)
		// Use up the slot, then the next is about a second away.
		if _, err := n.Reserve(ctx, "slow", 1, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		_, err := n.Reserve(ctx, "slow", 1, 100*time.Millisecond)
		var le *raftpace.LimitExceededError
		if !errors.As(err, &le) || !errors.Is(err, raftpace.ErrLimitExceeded) {
			t.Fatalf("%s: got %v, want LimitExceededError", n.ID(), err)
		}
		if le.Wait < 100*time.Millisecond || le.Wait > 2*time.Second {
			t.Errorf("%s: reported wait %v, want about 1s", n.ID(), le.Wait)
		}
	}
}

// n > 1 without waiting is served at once, on the leader and through a
// follower: the first attempt is made even with maxWait 0 (the clock has
// moved past it before the first look).
func TestNode_ReserveManyWithoutWaiting(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 30*time.Second)
	f := c.Node(c.Followers()[0])
	if err := f.SetLimit(ctx, "two", fsm.Limit{Rate: 5, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node.Node{c.Node(c.Leader()), f} {
		if _, err := n.Reserve(ctx, "two", 2, 0); err != nil {
			t.Errorf("%s: reserve 2 of a burst of 2 with maxWait 0: %v", n.ID(), err)
		}
		time.Sleep(500 * time.Millisecond) // the burst refills
	}
}

func TestNode_BadInput(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 30*time.Second)
	f := c.Node(c.Followers()[0])
	good := fsm.Limit{Rate: 5, Burst: 1}
	if err := f.SetLimit(ctx, "ok", good); err != nil {
		t.Fatal(err)
	}
	badLimits := []fsm.Limit{
		{Rate: 0, Burst: 1}, {Rate: -1, Burst: 1}, {Rate: math.NaN(), Burst: 1},
		{Rate: math.Inf(1), Burst: 1}, {Rate: 5, Burst: 0},
	}
	for _, lim := range badLimits {
		err := f.SetLimit(ctx, "ok", lim)
		if !errors.Is(err, raftpace.ErrInvalidRequest) || !errors.Is(err, fsm.ErrInvalidLimit) {
			t.Errorf("SetLimit(%+v): got %v, want ErrInvalidRequest wrapping ErrInvalidLimit", lim, err)
		}
	}
	for _, key := range []string{"", strings.Repeat("k", 257), "a b", "tab\t"} {
		if err := f.SetLimit(ctx, key, good); !errors.Is(err, fsm.ErrInvalidKey) {
			t.Errorf("SetLimit(key %q): got %v, want ErrInvalidKey", key, err)
		}
		if _, err := f.Reserve(ctx, key, 1, time.Second); !errors.Is(err, fsm.ErrInvalidKey) {
			t.Errorf("Reserve(key %q): got %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := f.Reserve(ctx, "never-set", 1, time.Second); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Errorf("unknown key: got %v, want ErrUnknownKey", err)
	}
	if _, err := f.Reserve(ctx, "ok", 2, time.Second); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Errorf("count above burst: got %v, want ErrInvalidRequest", err)
	}
	if _, err := f.Reserve(ctx, "ok", 0, time.Second); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Errorf("count 0: got %v, want ErrInvalidRequest", err)
	}
	// Nothing above changed the state: once every node has applied what the
	// leader has, each holds exactly the one good limit.
	for i := 0; i < c.Size(); i++ {
		waitFor(t, 10*time.Second, func() bool {
			lims, _ := c.Node(i).Limits(ctx)
			return len(lims) == 1
		})
		lims, _ := c.Node(i).Limits(ctx)
		if len(lims) != 1 || lims["ok"] != good {
			t.Errorf("node %d limits after bad input: %v", i, lims)
		}
	}
}

// After the leader dies, the new leader must not grant slots that overlap
// the old leader's. 80 callers at 50/s keep about 1.6s of slots queued,
// longer than an election, so the old leader's grants are still being used
// when the new leader starts.
func TestNode_LeaderFailoverKeepsCeiling(t *testing.T) {
	rep := failover(t)
	if !rep.OK() {
		t.Errorf("ceiling exceeded across failover:\n%s", rep.String())
	}
	if rep.Events < 100 {
		t.Errorf("only %d events: the cluster did not recover", rep.Events)
	}
}

// The same scenario with the protection off (a new leader starts every key
// at now) must break the ceiling: this is what makes the test above mean
// something.
func TestNode_LeaderFailoverWithoutHorizonsBreaksCeiling(t *testing.T) {
	rep := failover(t, func(_ int, c *node.Config) { c.Unsafe.FreshStart = true })
	if rep.OK() {
		t.Errorf("checker found no violation with inherited horizons ignored:\n%s", rep.String())
	}
}

func failover(t *testing.T, opts ...nodetest.Option) timeline.KeyReport {
	c := nodetest.New(t, 3, opts...)
	ctx := nodetest.Ctx(t, 60*time.Second)
	lim := fsm.Limit{Rate: 50, Burst: 5}
	if err := c.Node(0).SetLimit(ctx, "fo", lim); err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	var survivors []*node.Node
	for i := 0; i < 3; i++ {
		if i != old {
			survivors = append(survivors, c.Node(i))
		}
	}
	// Load only from the survivors, so every admitted event is recorded;
	// the old leader grants to them until it dies.
	runCtx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	go func() {
		time.Sleep(2 * time.Second)
		c.Kill(old)
	}()
	events := load(runCtx, t, survivors, "fo", 40)
	// Utilisation is not asserted across a failover: grants pause until the
	// new leader passes the inherited horizon.
	rep := timeline.Check(events, "fo", timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
		Windows: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
		Delta:   nodeUseGrace,
	})
	t.Log(rep.String())
	if c.Leader() == old {
		t.Fatalf("leader did not change")
	}
	return rep
}

func TestNode_LimitsSurviveRestart(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	lim := fsm.Limit{Rate: 7, Burst: 3}
	if err := c.Node(1).SetLimit(ctx, "persist", lim); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c.Kill(i)
	}
	for i := 0; i < 3; i++ {
		c.Restart(i)
	}
	c.Leader()
	for i := 0; i < 3; i++ {
		got, err := c.Node(i).Limit(ctx, "persist")
		if err != nil || got != lim {
			// Followers apply after the leader; give them a moment.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && (err != nil || got != lim) {
				time.Sleep(20 * time.Millisecond)
				got, err = c.Node(i).Limit(ctx, "persist")
			}
		}
		if err != nil || got != lim {
			t.Errorf("node %d after restart: %v, %v", i, got, err)
		}
	}
	if _, err := c.Node(0).Reserve(ctx, "persist", 1, 5*time.Second); err != nil {
		t.Errorf("reserve after restart: %v", err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
