package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Ten slow keys (2/s, burst 1), one closed-loop worker per key in each of
// three agents: every key gets at least 95% of its rate and none exceeds
// its ceiling. A slow key's queue of waiters runs up to 1.5 s ahead, past
// the reach of the last share renewal; before the fix one such key made
// the leader's F read 0 for every key (10 keys: 30.7% in all) and then the
// waiters were paced at a third of the rate (63%).
func TestE2E_TenSlowKeysEachGetTheirRate(t *testing.T) {
	t.Parallel()
	const keys, rate = 10, 2.0
	limits := map[string]map[string]float64{}
	var loads []string
	for i := range keys {
		k := fmt.Sprintf("slow%d", i)
		limits[k] = map[string]float64{"rate": rate, "burst": 1}
		loads = append(loads, k+":1")
	}
	policy := filepath.Join(t.TempDir(), "policy.json")
	raw, err := json.Marshal(map[string]any{"limits": limits})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, agentOpts{loads: loads, extra: []string{"--policy", policy}})
	time.Sleep(3 * time.Second) // every agent's load has found its limits
	from := time.Now()
	time.Sleep(20 * time.Second)
	to := time.Now()
	c.stopAll()
	evs := c.events()
	total := 0
	for i := range keys {
		k := fmt.Sprintf("slow%d", i)
		rep := check(evs, k, rate, 1, from.UnixNano(), to.UnixNano())
		total += rep.RateEvents
		if !rep.OK() {
			t.Errorf("%s: ceiling exceeded:\n%s", k, rep.String())
		}
		if rep.Utilisation < 0.95 {
			t.Errorf("%s: %.2f/s, %.1f%% of %v/s; want at least 95%%\n%s", k, rep.AchievedRate, 100*rep.Utilisation, rate, rep.String())
		}
	}
	t.Logf("%d keys at %v/s: %d events in %v, %.1f%% of the aggregate rate",
		keys, rate, total, to.Sub(from).Round(time.Millisecond), 100*float64(total)/(keys*rate*to.Sub(from).Seconds()))
}
