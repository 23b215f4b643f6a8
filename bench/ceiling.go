package bench

import (
	"context"
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

// raftpaceCeiling starts procs agents that each offer the ceiling's demand
// share at an open-loop rate, sets the limit and checks their timelines.
func (r *runner) raftpaceCeiling(cp ceilingPlan, procs int, id string) step {
	label := fmt.Sprintf("%s, ceiling %s/s, %d processes", report.RowLabel(id), report.FormatRate(cp.Rate), procs)
	return step{label: label, run: func(ctx context.Context) (string, error) {
		dir := filepath.Join(r.dir, fmt.Sprintf("%s-ceiling-%s", id, report.FormatRate(cp.Rate)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		const key = "ceiling"
		perProc := ceilingDemand * cp.Rate / float64(procs)
		c, err := startCluster(ctx, r.cfg.Binary, clusterSpec{dir: dir, size: procs, timeline: true, args: func(int, string) []string {
			return []string{"--load", fmt.Sprintf("%s:%d", key, cp.Concurrency),
				"--load-rate", strconv.FormatFloat(perProc, 'g', -1, 64),
				"--load-max-wait", cp.MaxWait.String(), "--load-duration", cp.Duration.String()}
		}})
		if err != nil {
			return "", err
		}
		lim := client.Limit{Rate: cp.Rate, Burst: 1}
		err = c.setLimit(ctx, key, lim)
		var reps []*LoadReport
		if err == nil {
			for _, a := range c.agents {
				var kl *KeyLoad
				if kl, err = waitKeyDone(ctx, a.proc, a.report, key, cp.Duration+30*time.Second); err != nil {
					break
				}
				reps = append(reps, &LoadReport{Node: a.id, Keys: map[string]*KeyLoad{key: kl}})
			}
		}
		if serr := c.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return "", err
		}
		return r.ceilingResult(id, cp, procs, key, reps, c.timelines())
	}}
}

// workerCeiling runs the ceiling for a bench-worker approach: 3 processes
// sharing the demand, or for xrate one process with all of it (and the
// callers of three), or for xrate-solo 3 processes each pacing alone.
func (r *runner) workerCeiling(cp ceilingPlan, name string) step {
	procs, conc := ceilingProcs, cp.Concurrency
	if name == "xrate" {
		procs, conc = 1, cp.Concurrency*ceilingProcs
	}
	label := fmt.Sprintf("%s, ceiling %s/s, %d process", report.RowLabel(name), report.FormatRate(cp.Rate), procs)
	if procs > 1 {
		label += "es"
	}
	return step{label: label, run: func(ctx context.Context) (string, error) {
		key := fmt.Sprintf("%s-ceiling-%s", r.runID, report.FormatRate(cp.Rate))
		dir := filepath.Join(r.dir, fmt.Sprintf("%s-ceiling-%s", name, report.FormatRate(cp.Rate)))
		perProc := ceilingDemand * cp.Rate / float64(procs)
		ws, err := r.startWorkers(ctx, dir, name, procs, client.Limit{Rate: cp.Rate, Burst: 1}, []string{
			"--load", fmt.Sprintf("%s:%d", key, conc),
			"--load-rate", strconv.FormatFloat(perProc, 'g', -1, 64),
			"--load-max-wait", cp.MaxWait.String(), "--load-duration", cp.Duration.String()}, true)
		if err != nil {
			return "", err
		}
		reps, err := waitWorkers(ctx, ws, cp.Duration+60*time.Second)
		if err != nil {
			return "", err
		}
		var tls []string
		for _, w := range ws {
			tls = append(tls, w.timeline)
		}
		return r.ceilingResult(name, cp, procs, key, reps, tls)
	}}
}

// ceilingResult checks the timelines of one ceiling run and records it.
func (r *runner) ceilingResult(id string, cp ceilingPlan, procs int, key string, reps []*LoadReport, timelines []string) (string, error) {
	events, err := timeline.ParseFiles(timelines...)
	if err != nil {
		return "", err
	}
	var loads []*KeyLoad
	for _, rep := range reps {
		if kl := rep.Keys[key]; kl != nil {
			loads = append(loads, kl)
		}
	}
	res := analyzeCeiling(events, key, client.Limit{Rate: cp.Rate, Burst: 1}, loads)
	res.ID, res.Processes, res.Concurrency, res.MaxWait = id, procs, loads[0].Concurrency, cp.MaxWait
	r.rep.Ceilings = append(r.rep.Ceilings, res)
	return res.Summary(), nil
}

// analyzeCeiling measures one ceiling run: the admitted rate over the
// steady interval (from a second after the last process started to when
// the first stopped), every window against the bound, and the admitted
// rate over time.
func analyzeCeiling(events []timeline.Event, key string, lim client.Limit, loads []*KeyLoad) *report.CeilingResult {
	res := &report.CeilingResult{Rate: lim.Rate, Burst: lim.Burst}
	var start, from, to, end int64
	for i, kl := range loads {
		if i == 0 || kl.From < start {
			start = kl.From
		}
		from = max(from, kl.From)
		if i == 0 || kl.To < to {
			to = kl.To
		}
		end = max(end, kl.To)
		res.Offered += kl.Rate
		res.ShedQueue += kl.ShedQueue
		res.Shed += kl.Shed
		res.Forfeited += kl.Forfeited
		res.Errors += kl.Errors
	}
	from += int64(steadySkip)
	if to <= from { // too short to skip a second: use it all
		from = start
	}
	rep := timeline.Check(events, key, timeline.Spec{
		Limit:   timeline.Limit{Rate: lim.Rate, Burst: lim.Burst},
		Windows: Windows(),
		Delta:   Delta,
		From:    from,
		To:      to,
	})
	res.Events = rep.Events
	res.Seconds = time.Duration(to - from).Seconds()
	res.SteadyEvents = rep.RateEvents
	res.AdmittedPct = 100 * rep.Utilisation
	for _, w := range rep.Windows {
		res.Windows = append(res.Windows, report.WindowCheck{Window: w.Window, Max: w.MaxCount, Bound: w.Bound, Over: w.Over})
		if w.Over {
			res.WindowsOver++
		}
	}
	res.Series = admittedSeries(events, key, start, end)
	return res
}

// admittedSeries counts key's events in report.SeriesStep buckets from start to
// end and returns, per bucket, the rate (events/s) over the trailing
// report.SeriesSmooth (shorter at the start).
func admittedSeries(events []timeline.Event, key string, start, end int64) []float64 {
	if end <= start {
		return nil
	}
	n := int((end - start + int64(report.SeriesStep) - 1) / int64(report.SeriesStep))
	counts := make([]int, n)
	for _, e := range events {
		if e.Key != key || e.At < start || e.At >= end {
			continue
		}
		counts[(e.At-start)/int64(report.SeriesStep)]++
	}
	k := int(report.SeriesSmooth / report.SeriesStep)
	out := make([]float64, n)
	sum := 0
	for i, c := range counts {
		sum += c
		if i >= k {
			sum -= counts[i-k]
		}
		span := min(i+1, k)
		out[i] = math.Round(float64(sum)/(float64(span)*report.SeriesStep.Seconds())*10) / 10
	}
	return out
}
