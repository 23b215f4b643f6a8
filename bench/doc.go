// Package bench measures raftpace side by side with the designs it
// replaces, on one machine and in one run: the Postgres pacer (one
// upsert-and-return statement per reservation), a GCRA Lua script in
// Redis (as go-redis/redis_rate), golang.org/x/time/rate in one process
// (the floor: no coordination at all) and gubernator v2 with GLOBAL
// behaviour; and, as the approach "python", clients/python/bench.py: the
// agent's unix socket from Python against the same process's Postgres
// statement and Redis script (python.go runs it, bench/report renders its
// JSON). raftpace bench (cmd/raftpace) runs it; bench/README.md says
// what each figure means and holds a run's results.
//
// Everything runs as real processes of the raftpace binary: raftpace as
// `raftpace agent` processes (a 3-node cluster on loopback) whose worker
// mode generates the load, the other approaches as `raftpace bench-worker`
// processes that run the same load generator against a pacer of
// bench/baseline (Postgres, Redis, XRate, Gubernator, Loopback). Each
// process writes a load report (bench/load: latency of each reservation
// call, admitted and shed counts) and, for the ceilings, a timeline that
// internal/timeline checks against R*W + B + R*delta, with the same delta
// for every approach.
//
// This package is the runner: Run starts the processes, steps through
// every approach and fills in a bench/report Report, which renders the
// results. It imports bench/baseline, bench/load and bench/report, and
// none of them imports it. It also keeps, under their old names, the
// names raftpace's commands use from those packages (LoadReport,
// Histogram, NewXRate, ConnectPostgres ...).
//
//	rep, err := bench.Run(ctx, bench.Config{Binary: exe, Quick: true, Progress: os.Stderr})
//	if err != nil { ... }
//	fmt.Print(rep.Markdown())
//	rep.WriteFiles("bench-out") // report.md, report.json, chart.svg
package bench
