package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/bench"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
)

const benchAbout = `Runs raftpace side by side with the designs it replaces, on this machine and
in one run, and prints a Markdown table of each figure with its ratio to
raftpace's:

  raftpace      3 agent processes on loopback: callers on the leader and on a
                follower, with leases and with --no-leases
  postgres      one upsert-and-return statement per reservation, one
                connection per process shared behind a mutex (--postgres)
  redis         a GCRA Lua script, as go-redis/redis_rate (--redis)
  xrate         golang.org/x/time/rate in one process: no coordination at all
  gubernator    gubernator v2, GLOBAL behaviour, 3 instances (built from
                bench/gubernator with the go command)
  loopback      not a pacer: one bare TCP round trip per reservation, the
                floor of any design that asks another process
  python        /usr/bin/python3 clients/python/bench.py: from one Python
                process, the agent's unix socket (the Python client) vs the
                Postgres statement (psycopg2) and the Redis script
                (redis-py), and the agent's throughput to 4 Python
                processes (target >= 20,000/s on 2 cores)

For each: reservation latency p50/p99 with 1 and 16 callers and
reservations/s at an unlimited rate; then ceilings of 7, 1,000 and 100,000
per second (burst 1) with demand at 3x the ceiling from 3 processes: the
admitted rate as % of the ceiling and the worst window against R*W+B+R*50ms.
With raftpace also "many slow keys": 10, 100 and 1,000 keys at 2/s each
(burst 1) with one closed-loop worker per key on each of 3 agents, the
admitted % overall and of the worst key, and windows over the bound.
An approach whose server (or, for python, python3, psycopg2 or redis-py)
is missing is skipped with the reason.

Progress goes to stderr. --out DIR gets report.md, report.json and
chart.svg (admitted rate over time per approach and ceiling). --quick
finishes in under a minute (shorter runs, the 1,000/s ceiling only). See
bench/README.md.`

func (c *cli) bench(name string, args []string) error {
	f := cmdline.New("bench", "[--quick] [--json] [--out DIR] [flags]", benchAbout)
	quick := f.Bool("quick", false, "shorter runs and fewer configurations (under a minute)")
	asJSON := f.Bool("json", false, "print the report as JSON instead of Markdown")
	out := f.String("out", "bench-out", "write report.md, report.json and chart.svg to `DIR` (\"\": don't)")
	pg := f.String("postgres", "", "Postgres `URL` for the Postgres pacer (default: RAFTPACE_BENCH_POSTGRES, or\n"+bench.DefaultPostgresURL+")")
	redis := f.String("redis", bench.DefaultRedisAddr, "`HOST:PORT` of the Redis server for the Redis GCRA script")
	only := f.String("only", "", "run only these approaches: `LIST` of "+strings.Join(bench.Approaches, ",")+",\nor a group of raftpace's alone: "+bench.KeysGroup+" (many slow keys), "+bench.WideGroup+" (keys made by a template; only when named)")
	gub := f.String("gubernator-src", "", "`DIR` of the bench/gubernator module (default: found from the working directory)")
	pyBench := f.String("python-bench", "", "`FILE` clients/python/bench.py for --only python (default: found from the working directory)")
	ceilings := f.String("ceilings", "", "measure these ceilings, `LIST` of events/s (default 7,1000,100000; --quick: 1000)")
	keys := f.String("keys", "", "many slow keys: measure these key counts, `LIST` (default 10,100,1000; --quick: 100)")
	keyRate := f.String("key-rate", "2", "many slow keys: each key's rate, `R` events/s (burst 1)")
	keysTemplate := f.Bool("keys-template", false, "many slow keys: give the keys their limit by one template (k*), not one limit each")
	wideKeys := f.Int("wide-keys", bench.DefaultWideKeys, "--only wide: make `N` keys by one template and use each once")
	keep := f.Bool("keep", false, "keep the working directory (agents' logs, timelines, load reports)")
	printBaselines := f.Bool("print-baselines", false, "print the Postgres statement and the Redis script the baselines run, as JSON, and exit\n(clients/python/bench.py runs the same ones)")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	if *printBaselines {
		return render.JSON(c.stdout, bench.ServerStatements())
	}
	var names []string
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !bench.IsApproach(n) && n != bench.KeysGroup && n != bench.WideGroup {
			return f.ValueError("--only %q: unknown approach %q (choose from %s, or %s, %s)", *only, n, strings.Join(bench.Approaches, ","), bench.KeysGroup, bench.WideGroup)
		}
		names = append(names, n)
	}
	var rates []float64
	for _, v := range strings.Split(*ceilings, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) || r > 1e7 {
			return f.ValueError("--ceilings %q: %q is not a rate (events/s, above 0, at most 1e7)", *ceilings, v)
		}
		rates = append(rates, r)
	}
	var counts []int
	for _, v := range strings.Split(*keys, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > bench.MaxKeys {
			return f.ValueError("--keys %q: %q is not a key count (a whole number from 1 to %d)", *keys, v, bench.MaxKeys)
		}
		counts = append(counts, k)
	}
	kr, err := f.Rate(*keyRate)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: finding the raftpace executable: %w", err)
	}
	pgURL := *pg
	if pgURL == "" {
		pgURL = bench.PostgresURL()
	}
	rep, err := bench.Run(c.ctx, bench.Config{
		Binary:        bin,
		Quick:         *quick,
		Only:          names,
		PostgresURL:   pgURL,
		RedisAddr:     *redis,
		GubernatorDir: *gub,
		PythonBench:   *pyBench,
		Ceilings:      rates,
		Keys:          counts,
		KeyRate:       kr,
		KeysTemplate:  *keysTemplate,
		WideKeys:      *wideKeys,
		Keep:          *keep,
		Progress:      c.stderr,
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep.Command = "raftpace " + strings.Join(append([]string{name}, args...), " ")
	if *out != "" {
		if err := rep.WriteFiles(*out); err != nil {
			return fmt.Errorf("bench: --out: %w", err)
		}
		fmt.Fprintf(c.stderr, "wrote %s, %s and %s\n", filepath.Join(*out, "report.md"),
			filepath.Join(*out, "report.json"), filepath.Join(*out, "chart.svg"))
	}
	if *asJSON {
		return render.JSON(c.stdout, rep)
	}
	_, err = fmt.Fprint(c.stdout, rep.Markdown())
	return err
}

const benchWorkerAbout = `Runs one approach's pacer in this process with the load generator of the
agent's worker mode (--load, --load-rate, --timeline, --load-report ...),
until every key's --load-duration has passed or a signal comes. Used by
raftpace bench; not a command for operators.`

func (c *cli) benchWorker(name string, args []string) error {
	f := cmdline.New("bench-worker", "--pacer NAME --rate R --load KEY[:N] [flags]", benchWorkerAbout)
	var lf loadFlags
	lf.register(f, false)
	pacer := f.String("pacer", "", "`NAME`: postgres, redis, xrate, gubernator or loopback")
	rateS := f.String("rate", "", "the limit's rate `R` (events/s) for every key")
	burst := f.Int("burst", 1, "the limit's burst `B`")
	nodeID := f.String("node-id", "w1", "`ID` written in the timeline")
	pgURL := f.String("postgres", bench.DefaultPostgresURL, "Postgres `URL`")
	redis := f.String("redis", bench.DefaultRedisAddr, "Redis `HOST:PORT`")
	gub := f.String("gubernator", "", "`HOST:PORT` of a gubernator instance's HTTP API")
	echo := f.String("loopback", "", "`HOST:PORT` of an echo server (--pacer loopback: one round trip per reservation)")
	grace := f.Duration("use-grace", bench.DefaultGrace, "how late after its time a slot may be used (`DURATION`)")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	r, err := f.Rate(*rateS)
	if err != nil {
		return err
	}
	var problems []string
	bad := func(err error) { problems = append(problems, err.Error()) }
	specs := lf.validate(bad)
	if len(specs) == 0 {
		bad(errors.New("--load: required"))
	}
	if err := fsm.ValidateID(*nodeID); err != nil {
		bad(fmt.Errorf("--node-id: %w", err))
	}
	lim := client.Limit{Rate: r, Burst: *burst}
	if err := lim.Validate(); err != nil {
		bad(fmt.Errorf("--rate/--burst: %w", err))
	}
	if len(problems) > 0 {
		return &cmdline.UsageError{Cmd: name, Msg: strings.Join(problems, "\n"), Usage: f.Usage()}
	}

	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	var p interface {
		loadgen.Reserver
		Close() error
	}
	switch *pacer {
	case "xrate":
		p, err = bench.NewXRate(lim, *grace)
	case "postgres":
		p, err = bench.ConnectPostgres(ctx, *pgURL, lim, *grace)
	case "redis":
		p, err = bench.ConnectRedis(ctx, *redis, lim, *grace)
	case "gubernator":
		if *gub == "" {
			return f.UsageError("--gubernator: required with --pacer gubernator")
		}
		p, err = bench.NewGubernator(*gub, lim, specs[0].Concurrency, *grace)
	case "loopback":
		if *echo == "" {
			return f.UsageError("--loopback: required with --pacer loopback")
		}
		p, err = bench.DialLoopback(ctx, *echo, *grace)
	default:
		return f.ValueError("--pacer %q: must be postgres, redis, xrate, gubernator or loopback", *pacer)
	}
	if err != nil {
		return fmt.Errorf("bench-worker: %w", err)
	}
	defer p.Close()

	tl, err := lf.OpenTimeline(*nodeID)
	if err != nil {
		return fmt.Errorf("bench-worker: --timeline: %w", err)
	}
	var rec loadgen.Recorder = loadgen.CountOnly{}
	if tl != nil {
		defer tl.Close()
		rec = tl
	}
	h := slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	log := slog.New(h).With("component", "bench-worker", "pacer", *pacer)
	loadCtx, stop := context.WithCancel(c.ctx)
	defer stop()
	run := loadgen.Start(loadCtx, loadgen.Target{Res: p}, specs, lf.Options(*grace, *nodeID, log), rec, log)
	select {
	case <-run.Done():
	case <-c.ctx.Done():
		stop()
		run.Wait()
	}
	var result error
	if tl != nil {
		result = tl.Close()
	}
	if err := lf.WriteReport(run, *nodeID); err != nil {
		result = errors.Join(result, fmt.Errorf("bench-worker: --load-report: %w", err))
	}
	return result
}
