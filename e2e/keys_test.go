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
// three agents: every key gets at least 95% of its rate (in one of two
// 10 s windows) and none exceeds its ceiling. A slow key's queue of
// waiters runs up to 1.5 s ahead, past the reach of the last share renewal; before the fix one such key made
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
	// Two 10 s windows (20 s in all, as before, so the test keeps its
	// length beside the parallel chaos tests): every key must reach 95% of
	// its rate, give or take one event, in one of them (the same one for all keys), and no key may
	// pass its ceiling in either. A fleet-wide stall of a few seconds (an election on a loaded
	// machine) costs one window 30%; the bug this test pins cost every
	// window 55-78%.
	const window = 10 * time.Second
	var bounds [3]time.Time
	bounds[0] = time.Now()
	for i := 1; i < len(bounds); i++ {
		time.Sleep(window)
		bounds[i] = time.Now()
	}
	c.stopAll()
	evs := c.events()
	var worst [2]float64
	var problems [2][]string
	for w := range worst {
		from, to := bounds[w], bounds[w+1]
		worst[w] = 1
		total := 0
		for i := range keys {
			k := fmt.Sprintf("slow%d", i)
			rep := check(evs, k, rate, 1, from.UnixNano(), to.UnixNano())
			total += rep.RateEvents
			if !rep.OK() {
				t.Errorf("window %d, %s: ceiling exceeded:\n%s", w+1, k, rep.String())
			}
			worst[w] = min(worst[w], rep.Utilisation)
			// One event of slack: at 2/s a 10 s window holds 19 to 21
			// events of a key paced exactly at its rate, depending on where
			// its boundaries fall (19 in 10.002 s read as 94.99% once).
			if float64(rep.RateEvents+1) < 0.95*rate*to.Sub(from).Seconds() {
				problems[w] = append(problems[w], fmt.Sprintf("%s: %.2f/s, %.1f%% of %v/s\n%s", k, rep.AchievedRate, 100*rep.Utilisation, rate, rep.String()))
			}
		}
		t.Logf("window %d: %d keys at %v/s: %d events in %v, %.1f%% of the aggregate rate, worst key %.1f%%",
			w+1, keys, rate, total, to.Sub(from).Round(time.Millisecond), 100*float64(total)/(keys*rate*to.Sub(from).Seconds()), 100*worst[w])
	}
	if len(problems[0]) > 0 && len(problems[1]) > 0 {
		for w := range problems {
			for _, p := range problems[w] {
				t.Errorf("window %d, %s", w+1, p)
			}
		}
		t.Errorf("no window where every key got 95%% of its rate (worst key %.1f%%, %.1f%%)", 100*worst[0], 100*worst[1])
	}
}

// Slow keys through a rolling deploy: 30 template keys at 1/s (burst 1),
// one closed-loop worker per key in each of three agents; a follower and
// then the leader are replaced (SIGTERM, then a new id with an empty data
// dir joining the running agents). In the 8 s from each SIGTERM the keys
// together admit at least 75% of their rate, and no key passes its
// ceiling over the whole run. Before the fix every replacement left them
// at a third of their rate for 6-10 s (the leaver's released fraction
// was all the leader held past the shares' reach, and slots there were
// paced at it): 50.0% in both phases (30, 30, 0, 0, 30, 0, 0, 30 events
// a second); 87.5% and 89.6% with it.
func TestE2E_SlowKeysThroughReplacements(t *testing.T) {
	t.Parallel()
	const keys, rate = 30, 1.0
	policy := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policy, []byte(`{"limits": {"t:*": {"rate": 1, "burst": 1}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var loads []string
	for i := range keys {
		loads = append(loads, fmt.Sprintf("t:%d:1", i))
	}
	c := startCluster(t, 3, agentOpts{loads: loads, extra: []string{"--policy", policy}})
	start := time.Now()
	time.Sleep(3 * time.Second) // every agent's load has found its limits
	leader := c.waitLeader(10 * time.Second)
	var order []*agent // a follower, then the leader
	for _, a := range c.agents {
		if a.id != leader {
			order = append(order, a)
			break
		}
	}
	order = append(order, c.agent(leader))
	const phase = 8 * time.Second
	var froms []time.Time
	for i, old := range order {
		at := time.Now()
		old.stop()
		n := c.newAgent(fmt.Sprintf("n%d", 4+i), nil)
		n.args = []string{"--log-format", "json", "--log-level", "debug", "--timeline", n.timeline}
		for _, l := range loads {
			n.args = append(n.args, "--load", l)
		}
		var join []string
		for _, a := range c.agents {
			if a != n && a.running() {
				join = append(join, a.addrs.GossipAddr)
			}
		}
		n.start(join)
		t.Logf("%s (leader: %v) replaced by %s in %v", old.id, old.id == leader, n.id, time.Since(at).Round(time.Millisecond))
		froms = append(froms, at)
		time.Sleep(time.Until(at.Add(phase)))
	}
	end := time.Now()
	c.stopAll()
	evs := c.events()
	all := prefixSeries(evs, "t:")
	for i, from := range froms {
		to := from.Add(phase)
		total := 0
		var perSec []int
		for s := from; s.Before(to); s = s.Add(time.Second) {
			n := all.count(s, s.Add(time.Second))
			perSec = append(perSec, n)
			total += n
		}
		got := float64(total) / (keys * rate * phase.Seconds())
		t.Logf("replacement %d (%s): %.1f%% of the keys' rate in %v from the SIGTERM; per second %v", i+1, order[i].id, 100*got, phase, perSec)
		if got < 0.75 {
			t.Errorf("replacement %d (%s): the keys admitted %.1f%% of their rate in the %v after it, want at least 75%% (per second: %v)", i+1, order[i].id, 100*got, phase, perSec)
		}
	}
	for k := range keys {
		key := fmt.Sprintf("t:%d", k)
		if rep := check(evs, key, rate, 1, start.UnixNano(), end.UnixNano()); !rep.OK() {
			t.Errorf("%s: ceiling exceeded:\n%s", key, rep.String())
		}
	}
}
