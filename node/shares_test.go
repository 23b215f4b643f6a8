package node_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
	"github.com/raftpace/raftpace/node/report"
)

func fastShares(_ int, c *node.Config) {
	c.ShareTTL = 600 * time.Millisecond
	c.FallbackFor = 4 * time.Second
	c.ReapMargin = time.Second
}

// Every member's fallback fraction converges to 1/N and the leader holds
// all of them: it paces at the full rate.
func TestShares_FractionsConvergeAndAreHeld(t *testing.T) {
	c := nodetest.New(t, 3, fastShares)
	ctx := nodetest.Ctx(t, 30*time.Second)
	waitFor(t, 15*time.Second, func() bool {
		st, err := c.Node(c.Leader()).Status(ctx)
		if err != nil || math.Abs(st.HeldFraction-1) > 1e-9 {
			return false
		}
		for _, m := range st.Members {
			if math.Abs(m.Fraction-1.0/3) > 1e-9 || !m.ShareHeld {
				return false
			}
		}
		return true
	})
	for i := 0; i < 3; i++ {
		st, _ := c.Node(i).Status(ctx)
		if st.Mode != "raft" {
			t.Errorf("n%d mode %q, want raft", i+1, st.Mode)
		}
	}
}

// quorumLoss kills two of three nodes and loads the survivor for 3 s: it
// falls back to pacing at its fraction of the rate.
func quorumLoss(t *testing.T, opts ...nodetest.Option) (timeline.KeyReport, report.Status) {
	c := nodetest.New(t, 3, append([]nodetest.Option{fastShares}, opts...)...)
	ctx := nodetest.Ctx(t, 60*time.Second)
	lim := fsm.Limit{Rate: 60, Burst: 3}
	if err := c.Node(0).SetLimit(ctx, "q", lim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool {
		st, _ := c.Node(c.Leader()).Status(ctx)
		for _, m := range st.Members {
			if math.Abs(m.Fraction-1.0/3) > 1e-9 {
				return false
			}
		}
		return true
	})
	survivor := c.Followers()[0]
	for i := 0; i < 3; i++ {
		if i != survivor {
			c.Kill(i)
		}
	}
	n := c.Node(survivor)
	waitFor(t, 5*time.Second, func() bool { st, _ := n.Status(ctx); return st.Mode == "local" })
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	events := load(runCtx, t, []*node.Node{n}, "q", 4)
	st, _ := n.Status(ctx)
	return timeline.Check(events, "q", timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
		Windows: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
		Delta:   nodeUseGrace,
	}), st
}

// With quorum lost the survivor admits about a third of the rate: the
// global ceiling holds even if the other two were pacing their own thirds.
func TestShares_QuorumLossDegradesToFraction(t *testing.T) {
	rep, st := quorumLoss(t)
	t.Log(rep.String())
	if st.Stats.Fallback == 0 {
		t.Errorf("no fallback grants counted: %+v", st.Stats)
	}
	if rep.AchievedRate > 60.0/3*1.1 || rep.AchievedRate < 60.0/3*0.8 {
		t.Errorf("survivor admitted %.1f/s, want about a third of 60/s", rep.AchievedRate)
	}
}

// The same with the protection off (fallback at the full rate) admits the
// whole rate on one node: three such nodes would triple the ceiling. The
// check the chaos suite relies on sees it.
func TestShares_QuorumLossAtFullRateIsCaught(t *testing.T) {
	rep, _ := quorumLoss(t, func(_ int, c *node.Config) { c.Unsafe.FallbackFullRate = true })
	t.Log(rep.String())
	if rep.AchievedRate < 60*0.8 {
		t.Errorf("unsafe full-rate fallback admitted only %.1f/s", rep.AchievedRate)
	}
}

// A node in fallback longer than FallbackFor stops admitting, with a clear
// error.
func TestShares_StopsAfterFallbackBudget(t *testing.T) {
	c := nodetest.New(t, 3, fastShares, func(_ int, c *node.Config) { c.FallbackFor = 1500 * time.Millisecond })
	ctx := nodetest.Ctx(t, 60*time.Second)
	if err := c.Node(0).SetLimit(ctx, "s", fsm.Limit{Rate: 100, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return c.Node(0).Stats().Granted >= 0 && ownFraction(t, c.Node(c.Followers()[0])) > 0 })
	survivor := c.Followers()[0]
	for i := 0; i < 3; i++ {
		if i != survivor {
			c.Kill(i)
		}
	}
	n := c.Node(survivor)
	waitFor(t, 10*time.Second, func() bool { st, _ := n.Status(ctx); return st.Mode == "stopped" })
	_, err := n.Reserve(ctx, "s", 1, time.Second)
	if !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("got %v, want ErrStopped", err)
	}
}

func ownFraction(t *testing.T, n *node.Node) float64 {
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Fraction
}
