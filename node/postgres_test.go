package node_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/testcluster"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
)

// testPostgres returns the test server's URL and a fresh schema dropped at
// the end. Without RAFTPACE_TEST_POSTGRES the test skips, except in CI,
// where it fails: CI must provide Postgres (scripts/test.sh does).
func testPostgres(t *testing.T) (url, schema string) {
	t.Helper()
	url = os.Getenv("RAFTPACE_TEST_POSTGRES")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("RAFTPACE_TEST_POSTGRES is not set; CI must run the tests through scripts/test.sh, which finds or starts PostgreSQL")
		}
		t.Skip("set RAFTPACE_TEST_POSTGRES (or run make test) to run the Postgres tests")
	}
	schema = fmt.Sprintf("rp_node_%d", rand.Int63())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	})
	return url, schema
}

// restartFromEmpty runs a 3-node cluster at its limit on one key (burst 20,
// horizon 5s ahead), closes it, starts a new cluster on empty data dirs
// against the same Postgres checkpoint and loads the key again. It returns
// the new cluster's admissions.
func restartFromEmpty(t *testing.T, unsafe node.Unsafe) ([]timeline.Event, fsm.Limit, bool) {
	url, schema := testPostgres(t)
	opt := func(_ int, c *node.Config) {
		c.PostgresURL, c.PostgresSchema = url, schema
		c.ClusterName = "restore"
		c.CheckpointEvery = 100 * time.Millisecond
		c.HorizonAhead = 5 * time.Second // the old horizon is still ahead when the new cluster starts
		c.Unsafe = unsafe
	}
	lim := fsm.Limit{Rate: 50, Burst: 20}
	first := testcluster.New(t, 3, opt)
	ctx := testcluster.Ctx(t, 90*time.Second)
	if err := first.Node(0).SetLimit(ctx, "r", lim); err != nil {
		t.Fatal(err)
	}
	nodes := []*node.Node{first.Node(0), first.Node(1), first.Node(2)}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	load(runCtx, t, nodes, "r", 4)
	cancel()
	time.Sleep(300 * time.Millisecond) // a last checkpoint with the latest horizon
	first.Close()

	second := testcluster.New(t, 3, opt)
	restored := false
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := second.Node(second.Leader()).Limit(ctx, "r"); err == nil && got == lim {
			restored = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	nodes = []*node.Node{second.Node(0), second.Node(1), second.Node(2)}
	runCtx, cancel = context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	return load(runCtx, t, nodes, "r", 4), lim, restored
}

// firstBurst checks the new cluster's admissions in windows of 100ms
// against a burst of one: a cluster that starts from a full bucket admits
// its whole burst at once.
func firstBurst(events []timeline.Event, lim fsm.Limit) timeline.KeyReport {
	return timeline.Check(events, "r", timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: 1},
		Windows: []time.Duration{100 * time.Millisecond},
		Delta:   nodeUseGrace,
	})
}

// A cluster started with empty data dirs restores limits and horizons from
// the checkpoint: it continues the old cluster's pace instead of starting
// from a full bucket (no burst).
func TestPostgres_RestoreFromEmptyDataDirs(t *testing.T) {
	events, lim, restored := restartFromEmpty(t, node.Unsafe{})
	if !restored {
		t.Fatal("limit not restored from the checkpoint")
	}
	if len(events) < 50 {
		t.Fatalf("the restored cluster admitted only %d events", len(events))
	}
	rep := firstBurst(events, lim)
	t.Log(rep.String())
	if !rep.OK() {
		t.Errorf("the restored cluster burst at start:\n%s", rep.String())
	}
}

// With only the limits restored (horizons ignored), the new cluster starts
// from a full bucket and bursts: the check above can fail.
func TestPostgres_RestoreWithoutHorizonsBursts(t *testing.T) {
	events, lim, restored := restartFromEmpty(t, node.Unsafe{RestoreLimitsOnly: true})
	if !restored {
		t.Fatal("limit not restored from the checkpoint")
	}
	rep := firstBurst(events, lim)
	t.Log(rep.String())
	if rep.OK() {
		t.Errorf("no burst seen with horizons not restored:\n%s", rep.String())
	}
}

// With quorum lost, members in fallback that reach Postgres pool their
// fractions on one cursor: of 5 nodes, the 2 survivors' fractions (2/5 of
// the rate) serve whichever of them has demand.
func TestPostgres_PooledFallback(t *testing.T) {
	url, schema := testPostgres(t)
	c := testcluster.New(t, 5, fastShares, func(_ int, cfg *node.Config) {
		cfg.PostgresURL, cfg.PostgresSchema = url, schema
		cfg.ClusterName = "pooled"
		cfg.FallbackFor = 30 * time.Second
		cfg.ReapMargin = 6 * time.Second
	})
	ctx := testcluster.Ctx(t, 90*time.Second)
	lim := fsm.Limit{Rate: 60, Burst: 5}
	if err := c.Node(0).SetLimit(ctx, "p", lim); err != nil {
		t.Fatal(err)
	}
	leader := c.Node(c.Leader())
	waitFor(t, 20*time.Second, func() bool {
		st, _ := leader.Status(ctx)
		for _, m := range st.Members {
			if math.Abs(m.Fraction-0.2) > 1e-9 {
				return false
			}
		}
		return len(st.Members) == 5
	})
	st, _ := leader.Status(ctx)
	var survivors []int
	for i := 0; i < 5; i++ {
		for _, m := range st.Members {
			if m.ID == c.Node(i).ID() && m.Role == "nonvoter" {
				survivors = append(survivors, i)
			}
		}
	}
	if len(survivors) != 2 {
		t.Fatalf("want 2 nonvoters, status %+v", st.Members)
	}
	// The survivors pool the fractions they have applied: wait until both
	// have applied 1/5 (the leader's view alone is not enough).
	waitFor(t, 20*time.Second, func() bool {
		for _, i := range survivors {
			if math.Abs(ownFraction(t, c.Node(i))-0.2) > 1e-9 {
				return false
			}
		}
		return true
	})
	for i := 0; i < 5; i++ {
		if i != survivors[0] && i != survivors[1] {
			c.Kill(i)
		}
	}
	a, b := c.Node(survivors[0]), c.Node(survivors[1])
	waitFor(t, 10*time.Second, func() bool {
		sa, _ := a.Status(ctx)
		sb, _ := b.Status(ctx)
		return sa.Mode == "pooled" && sb.Mode == "pooled"
	})
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	events := load(runCtx, t, []*node.Node{a}, "p", 4)
	rep := checkCeiling(t, events, "p", lim, 0)
	if rep.AchievedRate < 60*0.4*0.85 || rep.AchievedRate > 60*0.4*1.1 {
		t.Errorf("pooled survivor admitted %.1f/s, want about 2/5 of 60/s (its fraction and the idle survivor's)", rep.AchievedRate)
	}
}
