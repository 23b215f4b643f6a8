// Package baseline holds the designs raftpace is measured against, each
// as a pacer that one process of the bench drives: the Postgres pacer
// (one upsert-and-return statement per reservation), a GCRA Lua script in
// Redis (as go-redis/redis_rate, through a small RESP2 client of its own),
// golang.org/x/time/rate in one process (XRate: no coordination at all),
// a gubernator v2 instance with GLOBAL behaviour, and Loopback, no pacer
// but one bare TCP round trip to an EchoServer: the floor of any design
// that asks another process per reservation.
//
// Every pacer offers the reservation interface of client.Client (ReserveN
// with a maximum wait, Forfeit) and Close: a grant says when the slot may
// go and by when it must, and a wait longer than the maximum is refused
// with an error that wraps client.ErrLimitExceeded, without consuming
// anything. A pacer that answers from another process (Postgres, Redis,
// gubernator) places the answer on this host's clock as a raftpace
// follower places a forwarded grant: usable from arrival plus the wait,
// until the request's sending plus the wait plus the grace (DefaultGrace
// in the bench).
//
// The package runs no process and reads no timeline: the bench starts the
// servers and the worker processes; raftpace bench-worker builds a pacer
// of this package and runs the load generator against it.
package baseline
