// Package bench measures raftpace side by side with the designs it
// replaces, on one machine and in one run: the Postgres pacer (one
// upsert-and-return statement per reservation), a GCRA Lua script in
// Redis (as go-redis/redis_rate), golang.org/x/time/rate in one process
// (the floor: no coordination at all) and gubernator v2 with GLOBAL
// behaviour. raftpace bench (cmd/raftpace) runs it; bench/README.md says
// what each figure means and holds a run's results.
//
// Everything runs as real processes of the raftpace binary: raftpace as
// `raftpace agent` processes (a 3-node cluster on loopback) whose worker
// mode generates the load, the other approaches as `raftpace bench-worker`
// processes that run the same load generator against a pacer of this
// package (Postgres, Redis, XRate, Gubernator). Each process writes a
// LoadReport (latency of each reservation call, admitted and shed counts)
// and, for the ceilings, a timeline that internal/timeline checks against
// R*W + B + R*delta, with the same delta for every approach.
//
//	rep, err := bench.Run(ctx, bench.Config{Binary: exe, Quick: true, Progress: os.Stderr})
//	if err != nil { ... }
//	fmt.Print(rep.Markdown())
//	rep.WriteFiles("bench-out") // report.md, report.json, chart.svg
//
// The pacers implement the reservation interface of client.Client
// (ReserveN with a maximum wait, Forfeit): a grant says when the slot may
// go and by when it must, and a wait longer than the maximum is refused
// without consuming anything. A pacer that answers from another process
// (Postgres, Redis, gubernator) places the answer on this host's clock as
// a raftpace follower places a forwarded grant: usable from arrival plus
// the wait, until the request's sending plus the wait plus DefaultGrace.
package bench
