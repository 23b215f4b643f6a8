package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/bench/baseline"
	"github.com/raftpace/raftpace/bench/report"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/timeline"
)

// Approaches are the approaches Run compares, in table order: the names
// Config.Only (raftpace bench --only) takes.
var Approaches = []string{"raftpace", "postgres", "redis", "xrate", "gubernator", "loopback", "python"}

// KeysGroup is the name Config.Only takes for raftpace's many-slow-keys
// group alone (the "raftpace" approach includes it).
const KeysGroup = "keys"

// MaxKeys is the most keys the many-slow-keys group runs: each agent runs
// a worker per key.
const MaxKeys = 100_000

// IsApproach reports whether name is one of Approaches.
func IsApproach(name string) bool { return slices.Contains(Approaches, name) }

// Config says what Run measures and how.
type Config struct {
	// Binary is the raftpace executable: agents and bench workers are
	// processes of it. Required.
	Binary string
	// Quick runs shorter and fewer configurations (under a minute).
	Quick bool
	// Only selects approaches by name (see Approaches), or KeysGroup for
	// raftpace's many-slow-keys group alone; nil runs all.
	Only []string
	// PostgresURL is the server of the Postgres pacer; "" means
	// PostgresURL().
	PostgresURL string
	// RedisAddr is the Redis server; "" means DefaultRedisAddr.
	RedisAddr string
	// GubernatorDir is the bench/gubernator module; "" looks for it from
	// the working directory up.
	GubernatorDir string
	// PythonBench is clients/python/bench.py, which the "python" approach
	// runs; "" looks for it from the working directory up.
	PythonBench string
	// Python is its interpreter; "" means DefaultPython.
	Python string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
	// Ceilings are the ceilings to measure (events/s); nil means
	// DefaultCeilings, or 1,000/s in a quick run. The 8-process run is at
	// 7/s and runs when 7 is among them.
	Ceilings []float64
	// Keys are the key counts of the many-slow-keys group (each at most
	// MaxKeys); nil means 10, 100 and 1,000 (a quick run: 100).
	Keys []int
	// KeyRate is each key's rate in the many-slow-keys group (burst 1); 0
	// means 2/s.
	KeyRate float64
	// KeysTemplate gives the keys their limit by one template ("k*")
	// instead of one limit per key.
	KeysTemplate bool
	// WideKeys is the key count of the wide-keys group (WideGroup), which
	// runs only when Only names it; 0 means DefaultWideKeys.
	WideKeys int
	// WorkDir holds data dirs, logs, timelines and reports; "" uses a new
	// temporary directory, removed at the end unless the run failed or
	// Keep is set.
	WorkDir string
	Keep    bool
}

// Limits of the measurements.
const (
	unlimitedRate  = 1e9                  // "unlimited": nobody ever waits
	unlimitedBurst = 1000                 // as node's BenchmarkReserve
	ceilingDemand  = report.CeilingDemand // demand as a multiple of the ceiling
	ceilingProcs   = 3                    // processes sharing the demand
	steadySkip     = time.Second
	// Delta is the allowance for the delay between a grant and its use in
	// the ceiling check, the same for every approach: raftpace's default
	// UseGrace.
	Delta = DefaultGrace
)

// Windows are the window lengths of the ceiling check.
func Windows() []time.Duration { return timeline.DefaultWindows() }

// runner carries one Run.
type runner struct {
	cfg   Config
	plan  plan
	dir   string
	runID string
	rep   *report.Report
	out   io.Writer

	pgOK, redisOK bool
	gubBin        string
	python        *pythonRun
	gub           *gubCluster
	echo          *baseline.EchoServer
	step, steps   int
}

// Run measures every selected approach in turn and returns the report. A
// step that fails is reported as such and the run goes on; an approach
// whose server is unreachable is skipped with the reason. Run returns an
// error only when it cannot run at all or ctx ends.
func Run(ctx context.Context, cfg Config) (rep *report.Report, err error) {
	if cfg.Binary == "" {
		return nil, errors.New("bench: Config.Binary is required")
	}
	if cfg.PostgresURL == "" {
		cfg.PostgresURL = PostgresURL()
	}
	if cfg.RedisAddr == "" {
		cfg.RedisAddr = DefaultRedisAddr
	}
	r := &runner{cfg: cfg, plan: planFor(cfg.Quick, cfg.Ceilings, cfg.Keys), out: cfg.Progress, runID: strconv.FormatInt(time.Now().UnixNano()%1e10, 36)}
	if r.out == nil {
		r.out = io.Discard
	}
	r.dir = cfg.WorkDir
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "raftpace-bench-"); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer func() {
			if err == nil && !r.rep.Failed() && !cfg.Keep {
				os.RemoveAll(r.dir)
			} else {
				fmt.Fprintf(r.out, "logs kept in %s\n", r.dir)
			}
		}()
	}
	r.rep = report.New(cfg.Quick)
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
	r.rep.Finish()
	return r.rep, nil
}

func (r *runner) selected(name string) bool {
	return len(r.cfg.Only) == 0 || slices.Contains(r.cfg.Only, name)
}

func (r *runner) skip(name, reason string) {
	r.rep.Skipped = append(r.rep.Skipped, report.Skip{Approach: name, Reason: reason})
	fmt.Fprintf(r.out, "%s: skipped: %s\n", name, reason)
}

// probe finds out which servers answer, and builds gubernator.
func (r *runner) probe(ctx context.Context) {
	if r.selected("postgres") {
		if err := probePostgres(ctx, r.cfg.PostgresURL); err != nil {
			r.skip("postgres", fmt.Sprintf("no PostgreSQL server at %s: %v", baseline.RedactURL(r.cfg.PostgresURL), err))
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
	if r.selected("python") {
		if pr, why := r.probePython(ctx); why != "" {
			r.skip("python", why)
		} else {
			r.python = pr
		}
	}
}

// probePostgres connects to url and creates the Postgres pacer's table.
func probePostgres(ctx context.Context, url string) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return baseline.EnsurePostgresTable(pctx, conn)
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
			conn.Exec(ctx, "DELETE FROM "+baseline.PostgresTable+" WHERE key LIKE $1", r.runID+"-%")
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
	r.rep.Failures = append(r.rep.Failures, report.Failure{Step: label, Error: firstLine(msg)})
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
		gs = append(gs, group{name: fmt.Sprintf("ceiling %s/s", report.FormatRate(cp.Rate)), steps: steps})
	}
	for _, cp := range r.plan.ceilings {
		if cp.Rate == 7 && r.plan.eight && r.selected("raftpace") {
			gs = append(gs, group{name: "8 processes", steps: []step{r.raftpaceCeiling(cp, 8, "raftpace-8")}})
		}
	}
	if (r.selected("raftpace") || r.selected(KeysGroup)) && len(r.plan.manyKeys) > 0 {
		g := group{name: "many slow keys"}
		for _, n := range r.plan.manyKeys {
			g.steps = append(g.steps, r.manyKeys(n))
		}
		gs = append(gs, g)
	}
	if slices.Contains(r.cfg.Only, WideGroup) {
		n := r.cfg.WideKeys
		if n <= 0 {
			n = DefaultWideKeys
		}
		gs = append(gs, group{name: "wide keys", steps: []step{r.wideKeys(n)}})
	}
	if r.selected("python") && r.available("python") {
		gs = append(gs, r.pythonGroup())
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
	case "python":
		return r.python != nil
	}
	return true
}
