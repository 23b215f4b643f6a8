package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/timeline"
)

// Approaches are the approaches Run compares, in table order: the names
// Config.Only (raftpace bench --only) takes.
var Approaches = []string{"raftpace", "postgres", "redis", "xrate", "gubernator", "loopback"}

// IsApproach reports whether name is one of Approaches.
func IsApproach(name string) bool { return slices.Contains(Approaches, name) }

// Config says what Run measures and how.
type Config struct {
	// Binary is the raftpace executable: agents and bench workers are
	// processes of it. Required.
	Binary string
	// Quick runs shorter and fewer configurations (under a minute).
	Quick bool
	// Only selects approaches by name (see Approaches); nil runs all.
	Only []string
	// PostgresURL is the server of the Postgres pacer; "" means
	// PostgresURL().
	PostgresURL string
	// RedisAddr is the Redis server; "" means DefaultRedisAddr.
	RedisAddr string
	// GubernatorDir is the bench/gubernator module; "" looks for it from
	// the working directory up.
	GubernatorDir string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
	// Ceilings are the ceilings to measure (events/s); nil means
	// DefaultCeilings, or 1,000/s in a quick run. The 8-process run is at
	// 7/s and runs when 7 is among them.
	Ceilings []float64
	// WorkDir holds data dirs, logs, timelines and reports; "" uses a new
	// temporary directory, removed at the end unless the run failed or
	// Keep is set.
	WorkDir string
	Keep    bool
}

// Limits of the measurements.
const (
	unlimitedRate  = 1e9  // "unlimited": nobody ever waits
	unlimitedBurst = 1000 // as node's BenchmarkReserve
	ceilingDemand  = 3    // demand as a multiple of the ceiling
	ceilingProcs   = 3    // processes sharing the demand
	steadySkip     = time.Second
	// Delta is the allowance for the delay between a grant and its use in
	// the ceiling check, the same for every approach: raftpace's default
	// UseGrace.
	Delta = DefaultGrace
)

// Windows are the window lengths of the ceiling check.
func Windows() []time.Duration { return timeline.DefaultWindows() }

// ceilingPlan is one ceiling's run: the same for every approach.
type ceilingPlan struct {
	Rate        float64
	Duration    time.Duration
	Concurrency int           // callers per process
	MaxWait     time.Duration // longest wait a caller accepts
}

// DefaultCeilings are the ceilings (events/s) of a full run; a quick run
// measures 1,000/s only.
var DefaultCeilings = []float64{7, 1000, 100000}

// planCeiling sizes a ceiling's run. The maximum wait is about 250 slots
// (20ms to 1s), and each process gets callers for half the ceiling at that
// wait (R*MaxWait/2, rounded up to a power of two, at least 16): 1.5 times
// the share a process needs even if every caller waited the maximum, so
// that what limits admission is the pacer, not the load generator. (More
// callers only add scheduling work: on 2 cores, 3 x 2048 callers admitted
// less at 100,000/s than 3 x 1024.) Low rates run longer, so that one event
// more or less is a small fraction of the count: 7/s runs 30s.
func planCeiling(rate float64, quick bool) ceilingPlan {
	wait := time.Duration(min(max(250/rate, 0.02), 1) * float64(time.Second))
	conc := 16
	for float64(conc) < rate*wait.Seconds()/2 {
		conc *= 2
	}
	dur := time.Duration(min(max(210/rate, 10), 30) * float64(time.Second))
	if quick {
		dur = 4 * time.Second
	}
	return ceilingPlan{Rate: rate, Duration: dur.Round(time.Second), Concurrency: conc, MaxWait: wait.Round(time.Millisecond)}
}

// plan is what a run measures.
type plan struct {
	latency    time.Duration // per latency configuration
	callers    []int
	noLeaseLdr bool // also the leader without leases
	ceilings   []ceilingPlan
	eight      bool // the 7/s ceiling with 8 raftpace processes
	xrateSolo  bool // x/time/rate in 3 processes, each alone
	// manyKeys are the key counts of the many-slow-keys group, each
	// key's load running manyKeysDur on every agent.
	manyKeys    []int
	manyKeysDur time.Duration
}

func planFor(quick bool, ceilings []float64) plan {
	p := plan{latency: 4 * time.Second, callers: []int{1, 16}, noLeaseLdr: true, eight: true, xrateSolo: true,
		manyKeys: []int{10, 100, 1000}, manyKeysDur: 15 * time.Second}
	if quick {
		p = plan{latency: time.Second, callers: []int{1, 16}, manyKeys: []int{100}, manyKeysDur: 5 * time.Second}
	}
	if ceilings == nil {
		ceilings = DefaultCeilings
		if quick {
			ceilings = []float64{1000}
		}
	}
	for _, r := range ceilings {
		p.ceilings = append(p.ceilings, planCeiling(r, quick))
	}
	return p
}

// runner carries one Run.
type runner struct {
	cfg   Config
	plan  plan
	dir   string
	runID string
	rep   *Report
	out   io.Writer

	pgOK, redisOK bool
	gubBin        string
	gub           *gubCluster
	echo          *echoServer
	step, steps   int
}

// Run measures every selected approach in turn and returns the report. A
// step that fails is reported as such and the run goes on; an approach
// whose server is unreachable is skipped with the reason. Run returns an
// error only when it cannot run at all or ctx ends.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Binary == "" {
		return nil, errors.New("bench: Config.Binary is required")
	}
	if cfg.PostgresURL == "" {
		cfg.PostgresURL = PostgresURL()
	}
	if cfg.RedisAddr == "" {
		cfg.RedisAddr = DefaultRedisAddr
	}
	r := &runner{cfg: cfg, plan: planFor(cfg.Quick, cfg.Ceilings), out: cfg.Progress, runID: strconv.FormatInt(time.Now().UnixNano()%1e10, 36)}
	if r.out == nil {
		r.out = io.Discard
	}
	r.dir = cfg.WorkDir
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "raftpace-bench-"); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer func() {
			if err == nil && !r.rep.failed() && !cfg.Keep {
				os.RemoveAll(r.dir)
			} else {
				fmt.Fprintf(r.out, "logs kept in %s\n", r.dir)
			}
		}()
	}
	r.rep = newReport(cfg.Quick)
	began := time.Now()
	r.probe(ctx)
	groups := r.groups()
	for _, g := range groups {
		r.steps += len(g.steps)
	}
	defer r.cleanup()
	for _, g := range groups {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.runGroup(ctx, g)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.rep.Elapsed = time.Since(began)
	r.rep.finish()
	return r.rep, nil
}

func (r *runner) selected(name string) bool {
	return len(r.cfg.Only) == 0 || slices.Contains(r.cfg.Only, name)
}

func (r *runner) skip(name, reason string) {
	r.rep.Skipped = append(r.rep.Skipped, Skip{Approach: name, Reason: reason})
	fmt.Fprintf(r.out, "%s: skipped: %s\n", name, reason)
}

// probe finds out which servers answer, and builds gubernator.
func (r *runner) probe(ctx context.Context) {
	if r.selected("postgres") {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(pctx, r.cfg.PostgresURL)
		if err == nil {
			err = EnsurePostgresTable(pctx, conn)
			conn.Close(context.Background())
		}
		cancel()
		if err != nil {
			r.skip("postgres", fmt.Sprintf("no PostgreSQL server at %s: %v", redactURL(r.cfg.PostgresURL), err))
		} else {
			r.pgOK = true
		}
	}
	if r.selected("redis") {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c, err := ConnectRedis(pctx, r.cfg.RedisAddr, client.Limit{Rate: 1, Burst: 1}, DefaultGrace)
		cancel()
		if err != nil {
			r.skip("redis", fmt.Sprintf("no Redis server answers on %s: %v", r.cfg.RedisAddr, err))
		} else {
			c.Close()
			r.redisOK = true
		}
	}
	if r.selected("gubernator") {
		fmt.Fprintf(r.out, "gubernator: building bench/gubernator (the first build downloads and compiles its dependencies: minutes)\n")
		bin, err := buildGubernator(ctx, r.cfg.GubernatorDir)
		if err != nil {
			r.skip("gubernator", err.Error())
		} else {
			r.gubBin = bin
		}
	}
}

// redactURL drops a password from a URL for messages.
func redactURL(u string) string {
	if cfg, err := pgx.ParseConfig(u); err == nil && cfg.Password != "" {
		return strings.Replace(u, cfg.Password, "xxxxx", 1)
	}
	return u
}

func (r *runner) cleanup() {
	if r.echo != nil {
		r.echo.Close()
		r.echo = nil
	}
	if r.gub != nil {
		r.gub.stop()
		r.gub = nil
	}
	if r.pgOK {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, r.cfg.PostgresURL); err == nil {
			conn.Exec(ctx, "DELETE FROM "+PostgresTable+" WHERE key LIKE $1", r.runID+"-%")
			conn.Close(ctx)
		}
	}
}

// group is a set of steps that share a setup (a raftpace cluster).
type group struct {
	name     string
	setup    func(ctx context.Context) error
	teardown func() error
	steps    []step
}

type step struct {
	label string
	run   func(ctx context.Context) (summary string, err error)
}

func (r *runner) runGroup(ctx context.Context, g group) {
	if g.setup != nil {
		began := time.Now()
		if err := g.setup(ctx); err != nil {
			for _, s := range g.steps {
				r.step++
				r.fail(s.label, fmt.Errorf("%s: setup failed: %w", g.name, err))
			}
			return
		}
		fmt.Fprintf(r.out, "%s ready (%.1fs)\n", g.name, time.Since(began).Seconds())
	}
	for _, s := range g.steps {
		if ctx.Err() != nil {
			break
		}
		r.step++
		fmt.Fprintf(r.out, "[%d/%d] %s ...", r.step, r.steps, s.label)
		began := time.Now()
		sum, err := s.run(ctx)
		if err != nil {
			fmt.Fprintln(r.out, " failed")
			r.fail(s.label, err)
			continue
		}
		fmt.Fprintf(r.out, " %s (%.1fs)\n", sum, time.Since(began).Seconds())
	}
	if g.teardown != nil {
		if err := g.teardown(); err != nil && ctx.Err() == nil {
			r.fail(g.name, err)
		}
	}
}

func (r *runner) fail(label string, err error) {
	msg := err.Error()
	r.rep.Failures = append(r.rep.Failures, Failure{Step: label, Error: firstLine(msg)})
	fmt.Fprintf(r.out, "  %s: FAILED: %s\n", label, strings.ReplaceAll(msg, "\n", "\n    "))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// groups lists the run's steps.
func (r *runner) groups() []group {
	var gs []group
	if r.selected("raftpace") {
		gs = append(gs, r.raftpaceLatency(true), r.raftpaceLatency(false))
	}
	for _, name := range []string{"postgres", "redis", "xrate", "gubernator", "loopback"} {
		if r.selected(name) && r.available(name) {
			gs = append(gs, r.workerLatency(name))
		}
	}
	for _, cp := range r.plan.ceilings {
		var steps []step
		if r.selected("raftpace") {
			steps = append(steps, r.raftpaceCeiling(cp, ceilingProcs, "raftpace"))
		}
		for _, name := range []string{"postgres", "redis", "xrate", "gubernator"} {
			if r.selected(name) && r.available(name) {
				steps = append(steps, r.workerCeiling(cp, name))
				if name == "xrate" && r.plan.xrateSolo {
					steps = append(steps, r.workerCeiling(cp, "xrate-solo"))
				}
			}
		}
		gs = append(gs, group{name: fmt.Sprintf("ceiling %s/s", fmtRate(cp.Rate)), steps: steps})
	}
	for _, cp := range r.plan.ceilings {
		if cp.Rate == 7 && r.plan.eight && r.selected("raftpace") {
			gs = append(gs, group{name: "8 processes", steps: []step{r.raftpaceCeiling(cp, 8, "raftpace-8")}})
		}
	}
	if r.selected("raftpace") && len(r.plan.manyKeys) > 0 {
		g := group{name: "many slow keys"}
		for _, n := range r.plan.manyKeys {
			g.steps = append(g.steps, r.manyKeys(n))
		}
		gs = append(gs, g)
	}
	return gs
}

func (r *runner) available(name string) bool {
	switch name {
	case "postgres":
		return r.pgOK
	case "redis":
		return r.redisOK
	case "gubernator":
		return r.gubBin != ""
	}
	return true
}

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
			label := fmt.Sprintf("%s, %s", rowLabel(id), callersLabel(n))
			g.steps = append(g.steps, step{label: label, run: func(ctx context.Context) (string, error) {
				a := leader
				if w == "follower" {
					a = followers[0]
				}
				kl, err := r.agentLatency(ctx, c, a, latKey(a.id, n))
				if err != nil {
					return "", err
				}
				r.rep.latency(id).set(n, kl)
				return latSummary(kl), nil
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

// waitKeyDone polls an agent's load report until key's load has ended.
func waitKeyDone(ctx context.Context, p *proc, path, key string, d time.Duration) (*KeyLoad, error) {
	rep, err := waitKeysDone(ctx, p, path, []string{key}, d)
	if err != nil {
		return nil, err
	}
	return rep.Keys[key], nil
}

// waitKeysDone polls an agent's load report until the load of every key
// has ended, and returns the report. One read covers all keys: with 1,000
// keys the report is large, and the agent rewrites it as each key ends.
func waitKeysDone(ctx context.Context, p *proc, path string, keys []string, d time.Duration) (*LoadReport, error) {
	deadline := time.Now().Add(d)
	for {
		running := keys
		if rep, err := ReadLoadReport(path); err == nil {
			running = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
				kl := rep.Keys[k]
				return kl != nil && kl.To != 0
			})
			if len(running) == 0 {
				return rep, nil
			}
		}
		if p.exited() {
			return nil, fmt.Errorf("%s exited (%v)\n%s", p.name, p.err, p.tail())
		}
		if time.Now().After(deadline) {
			which := running[0]
			if len(running) > 1 {
				which += fmt.Sprintf(" (and %d other keys)", len(running)-1)
			}
			return nil, fmt.Errorf("%s: the load of %s did not end within %v\n%s", p.name, which, d, p.tail())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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
	tp := &Throughput{Leader: leader.id}
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
		fmtCount(tp.SlotsPerSec), fmtCount(tp.LeasedSlotsPerSec), fmtCount(tp.LeasesPerSec), 100*tp.LeaderCPU), nil
}

// ---- worker latency ---------------------------------------------------------

// workerLatency runs one bench-worker process per caller count at the
// unlimited rate.
func (r *runner) workerLatency(name string) group {
	g := group{name: name}
	for _, n := range r.plan.callers {
		g.steps = append(g.steps, step{label: fmt.Sprintf("%s, %s", rowLabel(name), callersLabel(n)), run: func(ctx context.Context) (string, error) {
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
			r.rep.latency(name).set(n, kl)
			return latSummary(kl), nil
		}})
	}
	return g
}

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
		e, err := startEcho()
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
			args = append(args, "--loopback", r.echo.addr())
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

// ---- ceilings ---------------------------------------------------------------

// raftpaceCeiling starts procs agents that each offer the ceiling's demand
// share at an open-loop rate, sets the limit and checks their timelines.
func (r *runner) raftpaceCeiling(cp ceilingPlan, procs int, id string) step {
	label := fmt.Sprintf("%s, ceiling %s/s, %d processes", rowLabel(id), fmtRate(cp.Rate), procs)
	return step{label: label, run: func(ctx context.Context) (string, error) {
		dir := filepath.Join(r.dir, fmt.Sprintf("%s-ceiling-%s", id, fmtRate(cp.Rate)))
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
	label := fmt.Sprintf("%s, ceiling %s/s, %d process", rowLabel(name), fmtRate(cp.Rate), procs)
	if procs > 1 {
		label += "es"
	}
	return step{label: label, run: func(ctx context.Context) (string, error) {
		key := fmt.Sprintf("%s-ceiling-%s", r.runID, fmtRate(cp.Rate))
		dir := filepath.Join(r.dir, fmt.Sprintf("%s-ceiling-%s", name, fmtRate(cp.Rate)))
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
	return ceilingSummary(res), nil
}

// analyzeCeiling measures one ceiling run: the admitted rate over the
// steady interval (from a second after the last process started to when
// the first stopped), every window against the bound, and the admitted
// rate over time.
func analyzeCeiling(events []timeline.Event, key string, lim client.Limit, loads []*KeyLoad) *CeilingResult {
	res := &CeilingResult{Rate: lim.Rate, Burst: lim.Burst}
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
		res.Windows = append(res.Windows, WindowCheck{Window: w.Window, Max: w.MaxCount, Bound: w.Bound, Over: w.Over})
		if w.Over {
			res.WindowsOver++
		}
	}
	res.Series = admittedSeries(events, key, start, end)
	return res
}

// SeriesStep is the bucket of the admitted-rate series; SeriesSmooth the
// trailing window it is averaged over.
const (
	SeriesStep   = 100 * time.Millisecond
	SeriesSmooth = time.Second
)

// admittedSeries counts key's events in SeriesStep buckets from start to
// end and returns, per bucket, the rate (events/s) over the trailing
// SeriesSmooth (shorter at the start).
func admittedSeries(events []timeline.Event, key string, start, end int64) []float64 {
	if end <= start {
		return nil
	}
	n := int((end - start + int64(SeriesStep) - 1) / int64(SeriesStep))
	counts := make([]int, n)
	for _, e := range events {
		if e.Key != key || e.At < start || e.At >= end {
			continue
		}
		counts[(e.At-start)/int64(SeriesStep)]++
	}
	k := int(SeriesSmooth / SeriesStep)
	out := make([]float64, n)
	sum := 0
	for i, c := range counts {
		sum += c
		if i >= k {
			sum -= counts[i-k]
		}
		span := min(i+1, k)
		out[i] = math.Round(float64(sum)/(float64(span)*SeriesStep.Seconds())*10) / 10
	}
	return out
}

// ---- gubernator -------------------------------------------------------------

// buildGubernator builds the bench/gubernator module into the user's cache
// directory (go build does nothing when the binary is up to date) and
// returns the binary, or an error saying exactly why not.
func buildGubernator(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		d, err := findUp("bench/gubernator/go.mod")
		if err != nil {
			return "", fmt.Errorf("cannot find the bench/gubernator module from the working directory (run from the repository, or --gubernator-src DIR): %w", err)
		}
		dir = filepath.Dir(d)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building it needs the go command: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "raftpace-bench", "gubernator-bench")
	bctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, gobin, "build", "-o", out, ".")
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build in %s failed: %v: %s", dir, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in %s or its parents", rel, dir)
		}
		dir = parent
	}
}

// gubCluster is gubernator instances on loopback, peers of each other.
type gubCluster struct {
	procs     []*proc
	httpAddrs []string
}

func startGubernator(ctx context.Context, bin, dir string, n int) (*gubCluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	grpc, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	httpA, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	g := &gubCluster{httpAddrs: httpA}
	for i := range n {
		log := filepath.Join(dir, fmt.Sprintf("g%d.log", i+1))
		p, err := startProc(fmt.Sprintf("gubernator g%d", i+1), bin,
			[]string{"--grpc", grpc[i], "--http", httpA[i], "--peers", strings.Join(grpc, ",")}, log)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	for i, p := range g.procs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, _ := os.ReadFile(p.logPath)
			if strings.Contains(string(b), "ready") {
				break
			}
			if p.exited() || time.Now().After(deadline) {
				g.stop()
				return nil, fmt.Errorf("gubernator g%d did not start:\n%s", i+1, p.tail())
			}
			select {
			case <-ctx.Done():
				g.stop()
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return g, nil
}

func (g *gubCluster) stop() {
	for _, p := range g.procs {
		p.stop(10 * time.Second)
	}
}
