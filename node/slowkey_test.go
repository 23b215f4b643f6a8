package node_test

import (
	"context"
	"errors"
	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/nodetest"
)

// A key slower than a share's reach (one event per 10 s; shares reach
// about ShareTTL, 2 s, ahead) is granted on one node and on three,
// through a follower too, and paced one interval apart; under load from
// three nodes a key at 0.5/s keeps its rate and its ceiling. Before
// wire.ShareOverrun neither was ever granted: every request waited for
// shares reaching the end of the slot's interval and ended in "no leader
// within max wait".
func TestNode_KeySlowerThanTheShareReach(t *testing.T) {
	for _, size := range []int{1, 3} {
		c := nodetest.New(t, size)
		ctx := nodetest.Ctx(t, 60*time.Second)
		lim := fsm.Limit{Rate: 0.1, Burst: 1}
		if err := c.Node(c.Leader()).SetLimit(ctx, "slow", lim); err != nil {
			t.Fatal(err)
		}
		// Wait until every member's fraction is committed and held: the
		// leader then paces at F = 1 from shares reaching only ShareTTL.
		waitFor(t, 15*time.Second, func() bool {
			st, err := c.Node(c.Leader()).Status(ctx)
			if err != nil || math.Abs(st.HeldFraction-1) > 1e-9 {
				return false
			}
			for _, m := range st.Members {
				if math.Abs(m.Fraction-1/float64(size)) > 1e-9 || !m.ShareHeld {
					return false
				}
			}
			return true
		})
		t.Logf("%d node(s): shares held", size)
		n := c.Node(c.Leader())
		if size > 1 {
			n = c.Node(c.Followers()[0])
		}
		first, err := n.Reserve(ctx, "slow", 1, 5*time.Second)
		if err != nil {
			t.Fatalf("%d node(s): first event of a 0.1/s key: %v", size, err)
		}
		// The next is one interval later: refused at once to a caller
		// that will not wait, and not granted before the reach gets there
		// (the caller's call would wait on the leader until then).
		var le *raftpace.LimitExceededError
		if _, err := n.Reserve(ctx, "slow", 1, time.Second); !errors.As(err, &le) ||
			le.Wait < 9*time.Second || le.Wait > 10*time.Second {
			t.Fatalf("%d node(s): second event within 1s: %v, want LimitExceededError waiting about 10s", size, err)
		}
		if time.Until(first.At) > time.Second {
			t.Fatalf("%d node(s): first event at %v, want at once", size, time.Until(first.At))
		}
		if size == 1 {
			// Slower than fsm.MinRate could never be granted: refused
			// where it enters, saying so; MinRate itself is granted.
			for _, r := range []float64{1e-300, fsm.MinRate * 0.99} {
				if err := n.SetLimit(ctx, "never", fsm.Limit{Rate: r, Burst: 1}); !errors.Is(err, raftpace.ErrInvalidRequest) ||
					!strings.Contains(err.Error(), "below the minimum") {
					t.Errorf("rate %v: %v, want ErrInvalidRequest below the minimum", r, err)
				}
			}
			if err := n.SetLimit(ctx, "slowest", fsm.Limit{Rate: fsm.MinRate, Burst: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Reserve(ctx, "slowest", 1, time.Second); err != nil {
				t.Errorf("the first event of a key at MinRate: %v", err)
			}
			if _, err := n.Reserve(ctx, "slowest", 1, time.Second); !errors.As(err, &le) || le.Wait < 29*time.Minute {
				t.Errorf("the second event of a key at MinRate: %v, want LimitExceededError waiting 30 min", err)
			}
			continue
		}
		// Under load from every node, a key at 0.5/s (2 s per event, as
		// far as a share reaches) keeps its ceiling and its rate.
		slow := fsm.Limit{Rate: 0.5, Burst: 1}
		if err := n.SetLimit(ctx, "slow2", slow); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 9*time.Second)
		ev := load(runCtx, t, []*node.Node{c.Node(0), c.Node(1), c.Node(2)}, "slow2", 2)
		cancel()
		rep := timeline.Check(ev, "slow2", timeline.Spec{
			Limit:   timeline.Limit{Rate: slow.Rate, Burst: slow.Burst},
			Windows: []time.Duration{time.Second, 2 * time.Second, 5 * time.Second},
			Delta:   nodeUseGrace,
		})
		t.Log(rep.String())
		if !rep.OK() {
			t.Errorf("ceiling exceeded:\n%s", rep.String())
		}
		// 9 s at 2 s per event: 5 at best; 4 allows the first to wait
		// for the limit to reach the nodes.
		if rep.Events < 4 {
			t.Errorf("%d events of a 0.5/s key in 9 s, want at least 4", rep.Events)
		}
	}
}
