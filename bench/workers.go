package bench

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/bench/baseline"
	"github.com/raftpace/raftpace/client"
)

// workerProc is one bench-worker process.
type workerProc struct {
	*proc
	report, timeline string
}

// startWorkers starts n bench-worker processes of the pacer name
// ("xrate-solo" is xrate) with the limit lim and extra flags, each with a
// load report and, if timelines, a buffered timeline.
func (r *runner) startWorkers(ctx context.Context, dir, name string, n int, lim client.Limit, extra []string, timelines bool) ([]*workerProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pacer := name
	if name == "xrate-solo" {
		pacer = "xrate"
	}
	if name == "loopback" && r.echo == nil {
		e, err := baseline.StartEcho()
		if err != nil {
			return nil, err
		}
		r.echo = e
	}
	if name == "gubernator" && r.gub == nil {
		g, err := startGubernator(ctx, r.gubBin, filepath.Join(r.dir, "gubernator"), ceilingProcs)
		if err != nil {
			return nil, err
		}
		r.gub = g
	}
	var ws []*workerProc
	for i := range n {
		id := "w" + strconv.Itoa(i+1)
		w := &workerProc{report: filepath.Join(dir, id+".load.json")}
		args := []string{"bench-worker", "--pacer", pacer, "--node-id", id,
			"--rate", strconv.FormatFloat(lim.Rate, 'g', -1, 64), "--burst", strconv.Itoa(lim.Burst),
			"--load-report", w.report}
		switch pacer {
		case "postgres":
			args = append(args, "--postgres", r.cfg.PostgresURL)
		case "redis":
			args = append(args, "--redis", r.cfg.RedisAddr)
		case "gubernator":
			args = append(args, "--gubernator", r.gub.httpAddrs[i%len(r.gub.httpAddrs)])
		case "loopback":
			args = append(args, "--loopback", r.echo.Addr())
		}
		if timelines {
			w.timeline = filepath.Join(dir, id+".timeline")
			args = append(args, "--timeline", w.timeline, "--timeline-buffer")
		}
		args = append(args, extra...)
		p, err := startProc(name+" "+id, r.cfg.Binary, args, filepath.Join(dir, id+".log"))
		if err != nil {
			for _, w := range ws {
				w.kill()
			}
			return nil, err
		}
		w.proc = p
		ws = append(ws, w)
	}
	return ws, nil
}

// waitWorkers waits for every worker to finish and reads their reports.
func waitWorkers(ctx context.Context, ws []*workerProc, d time.Duration) ([]*LoadReport, error) {
	var reps []*LoadReport
	var first error
	for _, w := range ws {
		if err := w.wait(ctx, d); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		rep, err := ReadLoadReport(w.report)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		reps = append(reps, rep)
	}
	return reps, first
}
