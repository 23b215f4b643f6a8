package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/bench/report"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/timeline"
)

// ---- many slow keys ---------------------------------------------------------

// defaultKeyRate is every key's rate in the many-slow-keys group (burst
// 1): slow enough that a key's slots are seconds apart, so what is
// measured is whether every key gets its share of leases, not how fast
// they come. Config.KeyRate changes it.
const defaultKeyRate = 2

// keyEvents is how many events of each key a full run's interval holds
// at least.
const keyEvents = 50

// manyKeysTemplate is the template that gives the keys k0, k1, ... their
// limit when Config.KeysTemplate is set.
const manyKeysTemplate = "k*"

// manyKeysLimit is every key's limit in this run.
func (r *runner) manyKeysLimit() client.Limit {
	rate := r.cfg.KeyRate
	if rate <= 0 {
		rate = defaultKeyRate
	}
	return client.Limit{Rate: rate, Burst: 1}
}

// manyKeysNames returns the n keys of a many-slow-keys run: k0, k1, ...
func manyKeysNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return keys
}

// writeKeysPolicy writes an agent --policy file giving every key lim, so
// that each key's limit is registered when the cluster starts (the load of
// a key starts once its limit is known) without n calls to the admin API.
func writeKeysPolicy(path string, keys []string, lim client.Limit) error {
	type limit struct {
		Rate  float64 `json:"rate"`
		Burst int     `json:"burst"`
	}
	limits := make(map[string]limit, len(keys))
	for _, k := range keys {
		limits[k] = limit{Rate: lim.Rate, Burst: lim.Burst}
	}
	b, err := json.Marshal(map[string]any{"limits": limits})
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// manyKeysArgs are an agent's flags: one closed-loop worker per key (no
// --load-rate: each reserves again once admitted, so every key always has
// a waiter on every agent) for d, the limits from policy.
func manyKeysArgs(keys []string, policy string, d time.Duration) []string {
	args := make([]string, 0, 2*len(keys)+4)
	for _, k := range keys {
		args = append(args, "--load", k+":1")
	}
	return append(args, "--load-duration", d.String(), "--policy", policy)
}

// manyKeys starts a 3-agent cluster in which every agent runs one
// closed-loop worker on each of n keys at manyKeysLimit, waits for the
// loads to end and checks each key's merged timeline.
func (r *runner) manyKeys(n int) step {
	lim := r.manyKeysLimit()
	label := fmt.Sprintf("raftpace, %s keys at %s/s each, %d processes", report.FormatRate(float64(n)), report.FormatRate(lim.Rate), ceilingProcs)
	if r.cfg.KeysTemplate {
		label += ", limits by the template " + manyKeysTemplate
	}
	return step{label: label, run: func(ctx context.Context) (string, error) {
		dir := filepath.Join(r.dir, fmt.Sprintf("raftpace-keys-%d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		keys := manyKeysNames(n)
		policy := filepath.Join(dir, "policy.json")
		limited := keys
		if r.cfg.KeysTemplate {
			limited = []string{manyKeysTemplate}
		}
		if err := writeKeysPolicy(policy, limited, lim); err != nil {
			return "", err
		}
		d := r.plan.manyKeysDur
		if !r.cfg.Quick {
			// Long enough that one event is at most 2% of a key's count,
			// so that "every key within 5% of its rate" can be read off the
			// worst key: 25 s at 2/s, 50 s at 1/s.
			d = max(d, time.Duration(keyEvents/lim.Rate*float64(time.Second)))
		}
		c, err := startCluster(ctx, r.cfg.Binary, clusterSpec{dir: dir, size: ceilingProcs, timeline: true, args: func(int, string) []string {
			return manyKeysArgs(keys, policy, d)
		}})
		if err != nil {
			return "", err
		}
		cpu0, cerr := agentsCPU(c)
		var reps []*LoadReport
		for _, a := range c.agents {
			var rep *LoadReport
			// Registering n limits takes the agents a while before the
			// last key's load starts: a minute on top of d.
			if rep, err = waitKeysDone(ctx, a.proc, a.report, keys, d+time.Minute); err != nil {
				break
			}
			reps = append(reps, rep)
		}
		cpu1, cerr2 := agentsCPU(c)
		if serr := c.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return "", err
		}
		events, err := timeline.ParseFiles(c.timelines()...)
		if err != nil {
			return "", err
		}
		res := analyzeManyKeys(events, keys, lim, reps)
		res.AgentSharePct = agentShares(events, c.agents)
		if cerr == nil && cerr2 == nil && len(events) > 0 {
			// Every agent's CPU over the run, start-up and registration
			// included, per event admitted: what a slow key costs.
			res.CPUPerEventUs = float64((cpu1 - cpu0).Microseconds()) / float64(len(events))
		}
		res.Template = r.cfg.KeysTemplate
		res.Processes = len(c.agents)
		r.rep.ManyKeys = append(r.rep.ManyKeys, res)
		return res.Summary(), nil
	}}
}

// analyzeManyKeys measures a many-slow-keys run: each key over its own
// steady interval (from a second after its load started on the last agent
// to when it stopped on the first), which is d less a second for every
// key however long the agents took to learn the limits (10,000 limits
// took them 16 s, and one interval common to all keys lost those
// seconds). A key's figure is its events in that interval against the
// slots a pacer that lost none would have given it there (slotsIn); the
// aggregate sums both over the keys. Each key's windows are checked over
// its whole run.
//
// Against the rate times the interval instead (kept as AdmittedPctOfSpan),
// a key admitted at exactly its rate lost up to one event: the interval
// ends d after the key's first start, and so do its slots, a few tens of
// milliseconds later (its first grant came after its start), so a slot
// fell just past the end of nearly every key. At 1/s over 48 s that was
// 0.4 events per key (2,400-4,000 of a 10,000-key run's 480,000) and a
// key at 97.9% with none lost.
func analyzeManyKeys(events []timeline.Event, keys []string, lim client.Limit, reps []*LoadReport) *report.ManyKeysResult {
	res := &report.ManyKeysResult{Keys: len(keys), Rate: lim.Rate, Burst: lim.Burst}
	type span struct{ start, from, to int64 }
	spans := make(map[string]*span, len(keys))
	for _, rep := range reps {
		for _, k := range keys {
			kl := rep.Keys[k]
			if kl == nil {
				continue
			}
			sp := spans[k]
			if sp == nil {
				sp = &span{start: kl.From, from: kl.From, to: kl.To}
				spans[k] = sp
			}
			sp.start, sp.from, sp.to = min(sp.start, kl.From), max(sp.from, kl.From), min(sp.to, kl.To)
			res.Forfeited += kl.Forfeited
			res.Errors += kl.Errors
		}
	}

	// Check scans every event for its key: split them by key first, or
	// 1,000 keys cost 1,000 passes over every key's events.
	byKey := make(map[string][]timeline.Event, len(keys))
	for _, e := range events {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	res.WorstPct = -1
	var want float64
	slots := 0
	for _, k := range keys {
		sp := spans[k]
		if sp == nil {
			sp = &span{}
		}
		from, to := sp.from+int64(steadySkip), sp.to
		if to <= from { // too short to skip a second: use it all
			from = sp.start
		}
		if secs := time.Duration(to - from).Seconds(); res.Seconds == 0 || secs < res.Seconds {
			res.Seconds = secs // the shortest key's interval
		}
		want += lim.Rate * time.Duration(to-from).Seconds()
		due := slotsIn(byKey[k], from, to, lim.Rate)
		slots += due
		rep := timeline.Check(byKey[k], k, timeline.Spec{
			Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
			Windows: Windows(),
			Delta:   Delta,
			From:    from,
			To:      to,
		})
		res.Events += rep.RateEvents
		if rep.RateEvents == 0 {
			res.Idle++
		}
		pct := 100.0
		if due > 0 {
			pct = 100 * float64(rep.RateEvents) / float64(due)
		}
		if res.WorstPct < 0 || pct < res.WorstPct {
			res.WorstKey, res.WorstPct = k, pct
		}
		if pct < 95 {
			res.Below95++
		}
		for _, w := range rep.Windows {
			if w.Over {
				res.WindowsOver++
			}
		}
	}
	if slots > 0 {
		res.AdmittedPct = 100 * float64(res.Events) / float64(slots)
	}
	if want > 0 {
		res.AdmittedPctOfSpan = 100 * float64(res.Events) / want
	}
	return res
}

// slotsIn is how many events a key at rate, saturated, admits in [from,
// to) if no slot is lost: the points of its slot grid there, the grid
// running from its last event before from every 1/rate (from itself when
// it has none). A lost or late slot moves the key's later events after
// the grid's points; one past the end of the interval is not counted.
func slotsIn(events []timeline.Event, from, to int64, rate float64) int {
	if rate <= 0 || to <= from {
		return 0
	}
	anchor := int64(math.MinInt64) // the key's last event before from
	for _, e := range events {
		if e.At < from {
			anchor = max(anchor, e.At)
		}
	}
	if anchor == math.MinInt64 {
		anchor = from
	}
	period := float64(time.Second) / rate
	first := math.Ceil(float64(from-anchor) / period)
	end := math.Ceil(float64(to-anchor) / period) // the first point at or after to
	return int(end - first)
}

// agentShares is each agent's share of events, in %, in c.agents' order:
// whether the cluster serves every member's callers of slow keys, or the
// leader's first (the leader's callers wait for no network).
func agentShares(events []timeline.Event, agents []*agentProc) []float64 {
	by := make(map[string]int, len(agents))
	for _, e := range events {
		by[e.Node]++
	}
	out := make([]float64, len(agents))
	for i, a := range agents {
		if len(events) > 0 {
			out[i] = 100 * float64(by[a.id]) / float64(len(events))
		}
	}
	return out
}

// agentsCPU is the user+system CPU time the cluster's agents have used.
func agentsCPU(c *cluster) (time.Duration, error) {
	var sum time.Duration
	for _, a := range c.agents {
		t, err := cpuTime(a.pid())
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}
