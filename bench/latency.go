package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/bench/report"
	"github.com/raftpace/raftpace/client"
)

// ---- raftpace latency -------------------------------------------------------

func latKey(id string, callers int) string { return fmt.Sprintf("lat-%s-%d", id, callers) }
func tputKey(id string) string             { return "tput-" + id }

// raftpaceLatency is one 3-agent cluster, with or without leases, in which
// every agent has a load per configuration (its own keys); a key's load
// starts when the bench sets its limit and stops after the latency
// duration, so one configuration runs at a time without restarting the
// cluster.
func (r *runner) raftpaceLatency(leases bool) group {
	var c *cluster
	var leader *agentProc
	var followers []*agentProc
	name := "raftpace cluster (leases)"
	suffix := ""
	if !leases {
		name, suffix = "raftpace cluster (--no-leases)", "-noleases"
	}
	g := group{name: name}
	g.setup = func(ctx context.Context) error {
		dir := filepath.Join(r.dir, "raftpace-latency"+suffix)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var err error
		c, err = startCluster(ctx, r.cfg.Binary, clusterSpec{dir: dir, size: 3, args: func(i int, id string) []string {
			args := []string{"--load-duration", r.plan.latency.String()}
			for _, n := range r.plan.callers {
				args = append(args, "--load", fmt.Sprintf("%s:%d", latKey(id, n), n))
			}
			if leases {
				args = append(args, "--load", tputKey(id)+":16")
			} else {
				args = append(args, "--no-leases")
			}
			return args
		}})
		if err != nil {
			return err
		}
		leader, followers, err = c.roles(ctx)
		return err
	}
	g.teardown = func() error {
		if c == nil {
			return nil
		}
		return c.stop()
	}
	where := []string{"leader", "follower"}
	if !leases && !r.plan.noLeaseLdr {
		where = []string{"follower"}
	}
	for _, w := range where {
		id := "raftpace-" + w + suffix
		for _, n := range r.plan.callers {
			label := fmt.Sprintf("%s, %s", report.RowLabel(id), report.CallersLabel(n))
			g.steps = append(g.steps, step{label: label, run: func(ctx context.Context) (string, error) {
				a := leader
				if w == "follower" {
					a = followers[0]
				}
				kl, err := r.agentLatency(ctx, c, a, latKey(a.id, n))
				if err != nil {
					return "", err
				}
				r.rep.Row(id).Set(n, kl)
				return report.LatencySummary(kl), nil
			}})
		}
	}
	if leases {
		g.steps = append(g.steps, step{label: "raftpace, 2 followers x 16 callers, leader's lease throughput", run: func(ctx context.Context) (string, error) {
			return r.throughput(ctx, c, leader, followers)
		}})
	}
	return g
}

// agentLatency sets key's limit to the unlimited rate and returns the
// agent's figures once the key's load has ended.
func (r *runner) agentLatency(ctx context.Context, c *cluster, a *agentProc, key string) (*KeyLoad, error) {
	if err := c.setLimit(ctx, key, client.Limit{Rate: unlimitedRate, Burst: unlimitedBurst}); err != nil {
		return nil, err
	}
	return waitKeyDone(ctx, a.proc, a.report, key, r.plan.latency+30*time.Second)
}

// throughput loads both followers at the unlimited rate and measures the
// slots they are granted through leases per second and the leader's CPU.
func (r *runner) throughput(ctx context.Context, c *cluster, leader *agentProc, followers []*agentProc) (string, error) {
	before, err := c.stats(ctx)
	if err != nil {
		return "", err
	}
	cpu0, err := cpuTime(leader.pid())
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	for _, f := range followers {
		if err := c.setLimit(ctx, tputKey(f.id), client.Limit{Rate: unlimitedRate, Burst: unlimitedBurst}); err != nil {
			return "", err
		}
	}
	tp := &report.Throughput{Leader: leader.id}
	for _, f := range followers {
		kl, err := waitKeyDone(ctx, f.proc, f.report, tputKey(f.id), r.plan.latency+30*time.Second)
		if err != nil {
			return "", err
		}
		tp.Callers += kl.Concurrency
		tp.Followers++
		tp.SlotsPerSec += float64(kl.Admitted) / kl.Seconds()
	}
	cpu1, err := cpuTime(leader.pid())
	if err != nil {
		return "", err
	}
	wall := time.Since(t0)
	after, err := c.stats(ctx)
	if err != nil {
		return "", err
	}
	var leased, leases uint64
	for _, f := range followers {
		leased += after[f.id].LeasedSlots - before[f.id].LeasedSlots
		leases += after[f.id].Leases - before[f.id].Leases
	}
	tp.LeasedSlotsPerSec = float64(leased) / wall.Seconds()
	tp.LeasesPerSec = float64(leases) / wall.Seconds()
	tp.LeaderCPU = float64(cpu1-cpu0) / float64(wall)
	tp.Seconds = wall.Seconds()
	r.rep.Throughput = tp
	return fmt.Sprintf("%s slots/s used, %s leased/s in %s leases/s; leader CPU %.0f%% of a core",
		report.FormatCount(tp.SlotsPerSec), report.FormatCount(tp.LeasedSlotsPerSec), report.FormatCount(tp.LeasesPerSec), 100*tp.LeaderCPU), nil
}

// ---- worker latency ---------------------------------------------------------

// workerLatency runs one bench-worker process per caller count at the
// unlimited rate.
func (r *runner) workerLatency(name string) group {
	g := group{name: name}
	for _, n := range r.plan.callers {
		g.steps = append(g.steps, step{label: fmt.Sprintf("%s, %s", report.RowLabel(name), report.CallersLabel(n)), run: func(ctx context.Context) (string, error) {
			key := fmt.Sprintf("%s-lat-%d", r.runID, n)
			dir := filepath.Join(r.dir, name+"-latency-"+strconv.Itoa(n))
			ws, err := r.startWorkers(ctx, dir, name, 1, client.Limit{Rate: unlimitedRate, Burst: unlimitedBurst},
				[]string{"--load", fmt.Sprintf("%s:%d", key, n), "--load-duration", r.plan.latency.String()}, false)
			if err != nil {
				return "", err
			}
			reps, err := waitWorkers(ctx, ws, r.plan.latency+60*time.Second)
			if err != nil {
				return "", err
			}
			kl := reps[0].Keys[key]
			if kl == nil {
				return "", fmt.Errorf("%s: no figures for %s", name, key)
			}
			r.rep.Row(name).Set(n, kl)
			return report.LatencySummary(kl), nil
		}})
	}
	return g
}
