package node_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
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
	first := nodetest.New(t, 3, opt)
	ctx := nodetest.Ctx(t, 90*time.Second)
	if err := first.Node(0).SetLimit(ctx, "r", lim); err != nil {
		t.Fatal(err)
	}
	nodes := []*node.Node{first.Node(0), first.Node(1), first.Node(2)}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	load(runCtx, t, nodes, "r", 4)
	cancel()
	time.Sleep(300 * time.Millisecond) // a last checkpoint with the latest horizon
	first.Close()

	second := nodetest.New(t, 3, opt)
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

// A cluster started with empty data dirs restores the concurrency caps and
// the refusal pauses still running from the checkpoint: every node has the
// caps, and the pause holds the new fleet off until at least when it would
// have ended in the old one. A cap deleted and a pause over before the
// restart stay gone.
func TestPostgres_RestoreCapsAndPauses(t *testing.T) {
	url, schema := testPostgres(t)
	opt := func(_ int, c *node.Config) {
		c.PostgresURL, c.PostgresSchema = url, schema
		c.ClusterName = "restore-caps"
		c.CheckpointEvery = 100 * time.Millisecond
	}
	const pause = 30 * time.Second
	lim := fsm.Limit{Rate: 50, Burst: 5}
	first := nodetest.New(t, 3, opt)
	ctx := nodetest.Ctx(t, 90*time.Second)
	n0 := first.Node(0)
	for _, key := range []string{"p", "short"} {
		if err := n0.SetLimit(ctx, key, lim); err != nil {
			t.Fatal(err)
		}
	}
	for key, max := range map[string]int{"c": 3, "big": fsm.MaxCap, "gone": 5} {
		if err := n0.SetCap(ctx, key, max); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a checkpoint with "gone"
	if err := n0.DeleteCap(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	pauseStart := time.Now() // the pause ends no earlier than pauseStart+pause
	if _, err := first.Node(1).Pause(ctx, "p", pause); err != nil {
		t.Fatal(err)
	}
	if _, err := n0.Pause(ctx, "short", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a last checkpoint, after "short" ended
	first.Close()

	second := nodetest.New(t, 3, opt)
	wantCaps := map[string]int{"c": 3, "big": fsm.MaxCap}
	for i := 0; i < 3; i++ {
		nd := second.Node(i)
		waitFor(t, 20*time.Second, func() bool {
			caps, err := nd.Caps(ctx)
			return err == nil && reflect.DeepEqual(caps, wantCaps) && nd.PausedFor("p") > 0
		})
		if _, err := nd.Cap(ctx, "gone"); !errors.Is(err, raftpace.ErrUnknownKey) {
			t.Errorf("node %d: cap deleted before the restart: err %v, want ErrUnknownKey", i, err)
		}
		// The restored pause ends no earlier than the old one (it is
		// measured from the restore's apply), and not much later.
		left, floor := nd.PausedFor("p"), pause-time.Since(pauseStart)
		if left < floor-50*time.Millisecond || left > floor+5*time.Second {
			t.Errorf("node %d: restored pause of p has %v left, want about %v (never less)", i, left, floor)
		}
		if p := nd.PausedFor("short"); p != 0 {
			t.Errorf("node %d: a pause over before the restart came back: %v left", i, p)
		}
		_, err := nd.Reserve(ctx, "p", 1, 0)
		var pe *raftpace.PausedError
		if !errors.As(err, &pe) || pe.Key != "p" {
			t.Errorf("node %d: Reserve on the paused key: %v, want a *PausedError", i, err)
		}
		if _, err := nd.Reserve(ctx, "short", 1, time.Second); err != nil {
			t.Errorf("node %d: Reserve on a key whose pause ended: %v", i, err)
		}
	}
	// The new cluster checkpoints the restored caps and pause in turn: a
	// third start from empty data dirs would get them back too.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	waitFor(t, 10*time.Second, func() bool {
		var caps, pauses int
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.caps WHERE cluster = 'restore-caps'),
			(SELECT count(*) FROM `+schema+`.pauses WHERE cluster = 'restore-caps' AND key = 'p' AND paused_until > clock_timestamp())`).Scan(&caps, &pauses)
		return err == nil && caps == 2 && pauses == 1
	})
}

// With quorum lost, members in fallback that reach Postgres pool their
// fractions on one cursor: of 5 nodes, the 2 survivors' fractions (2/5 of
// the rate) serve whichever of them has demand.
func TestPostgres_PooledFallback(t *testing.T) {
	url, schema := testPostgres(t)
	c := nodetest.New(t, 5, fastShares, func(_ int, cfg *node.Config) {
		cfg.PostgresURL, cfg.PostgresSchema = url, schema
		cfg.ClusterName = "pooled"
		cfg.FallbackFor = 30 * time.Second
		cfg.ReapMargin = 6 * time.Second
	})
	ctx := nodetest.Ctx(t, 90*time.Second)
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

// restoreQuota spends 40 of a quota of 60 an hour on one cluster, closes
// it, starts another on empty data dirs against the same checkpoint and
// spends what it lets through: the total of both for the hour.
func restoreQuota(t *testing.T, unsafe node.Unsafe) (first, second int) {
	url, schema := testPostgres(t)
	opt := func(_ int, c *node.Config) {
		c.PostgresURL, c.PostgresSchema = url, schema
		c.ClusterName = "restore-quota"
		c.CheckpointEvery = 100 * time.Millisecond
		c.Unsafe = unsafe
	}
	lim := fsm.Limit{Rate: 50, Burst: 5, Quota: 60, Per: fsm.PerHour}
	ctx := nodetest.Ctx(t, 90*time.Second)
	spend := func(c *nodetest.Cluster, most int) (n int) {
		for n < most {
			_, err := c.Node(c.Leader()).Reserve(ctx, "q", 5, 2*time.Second)
			if errors.Is(err, raftpace.ErrQuotaExhausted) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			n += 5
		}
		return n
	}
	one := nodetest.New(t, 3, opt)
	if err := one.Node(0).SetLimit(ctx, "q", lim); err != nil {
		t.Fatal(err)
	}
	first = spend(one, 40)
	time.Sleep(300 * time.Millisecond) // a last checkpoint
	one.Close()
	two := nodetest.New(t, 3, opt)
	for {
		if got, err := two.Node(two.Leader()).Limit(ctx, "q"); err == nil && got == lim {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return first, spend(two, 100)
}

// A quota survives a restart from empty data dirs: the new cluster starts
// its window at the checkpoint's count (raised by the margin the old leader
// could have committed since), so the hour never passes its quota.
func TestPostgres_RestoreQuota(t *testing.T) {
	first, second := restoreQuota(t, node.Unsafe{})
	t.Logf("first cluster %d events, restored cluster %d: %d of a quota of 60", first, second, first+second)
	if first != 40 || first+second > 60 {
		t.Fatalf("first cluster %d events, restored cluster %d: %d in the hour, quota 60", first, second, first+second)
	}
}

// The twin: with the counts not restored, the new cluster spends the
// whole quota again.
func TestPostgres_RestoreQuotaTwin(t *testing.T) {
	first, second := restoreQuota(t, node.Unsafe{RestoreLimitsOnly: true})
	if first+second <= 60 {
		t.Fatalf("counts not restored, yet %d+%d events kept the quota of 60: the check cannot fail", first, second)
	}
}
