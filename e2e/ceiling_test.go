package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// runLoad starts a 3-agent cluster loading two keys, sets their limits
// through one agent, lets the load run for d and stops everything. It
// returns the merged timelines and the interval of steady load.
func runLoad(t *testing.T, mode string, d time.Duration) ([]timeline.Event, int64, int64) {
	c := startCluster(t, 3, agentOpts{loads: []string{"fast:4", "slow:2"}, loadMode: mode})
	c.agents[1].mustCLI("limit", "set", "fast", "--rate", "20", "--burst", "1")
	c.agents[2].mustCLI("limit", "set", "slow", "--rate", "7", "--burst", "2")
	set := time.Now()
	time.Sleep(d)
	stop := time.Now()
	c.stopAll()
	// Load starts within ~100ms of the limit being set (agents poll for an
	// unknown key); measure utilisation once it has.
	return c.events(), set.Add(time.Second).UnixNano(), stop.Add(-200 * time.Millisecond).UnixNano()
}

func check(evs []timeline.Event, key string, rate float64, burst int, from, to int64) timeline.KeyReport {
	return timeline.Check(evs, key, timeline.Spec{
		Limit:   timeline.Limit{Rate: rate, Burst: burst},
		Windows: windows(),
		Delta:   useGrace,
		From:    from,
		To:      to,
	})
}

// Three agent processes share one ceiling of 20/s (and another key at
// 7/s at the same time): in no window of 0.5, 1, 2 or 5 s do they pass
// R*W + B + R*delta, and together they reach at least 95% of R.
func TestE2E_ThreeProcessesShareOneCeiling(t *testing.T) {
	t.Parallel()
	evs, from, to := runLoad(t, "raft", 12*time.Second)
	for _, k := range []struct {
		key   string
		rate  float64
		burst int
	}{{"fast", 20, 1}, {"slow", 7, 2}} {
		rep := check(evs, k.key, k.rate, k.burst, from, to)
		t.Log(rep.String())
		if !rep.OK() {
			t.Errorf("%s: ceiling exceeded:\n%s", k.key, rep.String())
		}
		if rep.Utilisation < 0.95 {
			t.Errorf("%s: achieved %.2f/s, %.1f%% of %v/s; want at least 95%%", k.key, rep.AchievedRate, 100*rep.Utilisation, k.rate)
		}
		if len(rep.PerNode) != 3 {
			t.Errorf("%s: events from %d nodes, want 3: %v", k.key, len(rep.PerNode), rep.PerNode)
		}
	}
}

// The same load with coordination turned off (each process pacing alone at
// R) must be reported as a violation, at roughly 3 x R: the check above can
// fail.
func TestE2E_WithoutCoordinationCeilingBreaks(t *testing.T) {
	t.Parallel()
	evs, from, to := runLoad(t, "solo", 6*time.Second)
	rep := check(evs, "fast", 20, 1, from, to)
	t.Log(rep.String())
	if rep.OK() {
		t.Fatalf("checker found no violation with coordination off:\n%s", rep.String())
	}
	if rep.AchievedRate < 2.5*20 {
		t.Errorf("solo pacing admitted %.1f/s, expected about 3 x 20/s", rep.AchievedRate)
	}
	fmt.Println() // keep the report readable under -v
}
