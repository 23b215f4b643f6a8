// Package pgstore is raftpace's Postgres layer: the leader's checkpoint,
// the bootstrap of a cluster from it, discovery of members' addresses, the
// Postgres-pooled fallback cursor, and the witness that lets the leader
// fence a silent member (DESIGN.md sections 5, 6 and 9).
//
// Postgres is optional for raftpace; where it is used, a *Store talks to
// it through a small pool (at most 4 connections).
//
//	s, err := pgstore.Open(ctx, pgstore.Config{URL: url, Cluster: "prod"})
//	// leader, periodically and on every config change:
//	err = s.SaveCheckpoint(ctx, pgstore.Checkpoint{Limits: ..., Members: ..., Horizons: ..., Caps: ..., Pauses: ...})
//	// a cluster started with empty data dirs:
//	cp, found, err := s.LoadCheckpoint(ctx)
//	// every member, about once a second:
//	fenced, err := s.Witness(ctx, "node-1")
//	// a member in fallback that reaches Postgres:
//	err = s.JoinPool(ctx, "node-1", 0.25, 2*time.Second)
//	wait, err := s.ReservePooled(ctx, "node-1", "google-images", lim, 1, 100*time.Millisecond)
//	// the leader, to take back a silent member's fraction:
//	res, err := s.Fence(ctx, "node-2", 3*time.Second, 5*time.Second)
//
// # Clock rules
//
// No host's wall clock is ever stored, sent or compared. Every time in the
// tables is a timestamptz computed by Postgres with clock_timestamp() (the
// real time of the statement, not of its transaction, which now() would
// give). Between the node and Postgres only durations travel:
//
//   - A horizon goes in as "ahead" (how far past the moment of writing it
//     lies) and is stored as clock_timestamp() + ahead; it comes out as
//     GREATEST(horizon_at - clock_timestamp(), 0), which the caller adds to
//     its own clock read after the call returns. Both directions err late:
//     the time a request and its answer spend in flight only pushes the
//     horizon further out, which is the safe side for a new leader.
//   - A pause travels the same way, as the time it still runs: stored as
//     clock_timestamp() + remaining, read as paused_until - clock_timestamp()
//     (pauses already over are left out). Both directions err late, the safe
//     side for a refusal pause.
//   - A pool registration lasts ttl from the statement; the member measures
//     its own deadline from before the call, so it stops first.
//   - ReservePooled answers with a wait, measured by the caller from when the
//     answer arrives (so it errs late by the answer's delay).
//   - Discovery's maxAge is compared with updated_at on Postgres's clock.
//   - A heartbeat is stored as seen_at = clock_timestamp(); the member counts
//     its licence from before it sent the call, Fence from seen_at, and the
//     leader counts Fence's Wait from when the answer arrives.
//
// Postgres's resolution is one microsecond: durations go in rounded up to
// the microsecond (ahead, remaining pause, ttl, Fence's stale and licence),
// and the pool's interval is rounded up, so rounding never makes anything
// earlier or faster.
//
// # Tables
//
// Open creates the schema (Config.Schema, default "raftpace") and these
// tables when missing, in one transaction under an advisory lock, so that
// several nodes may start at once. Every row is scoped by cluster
// (Config.Cluster), so several clusters can share a schema; a Store sees
// only its own cluster's rows.
//
//	limits       (cluster, key, rate float8, burst int)           PK (cluster, key)
//	             the cluster's limits; SaveCheckpoint replaces them
//	members      (cluster, node_id, addr, fraction float8)        PK (cluster, node_id)
//	             the raft members and their fallback fractions; replaced likewise
//	horizons     (cluster, key, horizon_at timestamptz)           PK (cluster, key)
//	             committed horizons; horizon_at only ever grows
//	addresses    (cluster, node_id, raft_addr, gossip_addr,
//	              updated_at timestamptz)                         PK (cluster, node_id)
//	             published addresses for discovery
//	pool_members (cluster, node_id, fraction float8,
//	              expires_at timestamptz)                         PK (cluster, node_id)
//	             registrations in the fallback pool
//	pool_cursors (cluster, key, tat timestamptz)                  PK (cluster, key)
//	             the pool's GCRA cursor (theoretical arrival time) per key
//	caps         (cluster, key, max int)                          PK (cluster, key)
//	             concurrency caps; SaveCheckpoint replaces them like limits
//	pauses       (cluster, key, paused_until timestamptz)         PK (cluster, key)
//	             refusal pauses; paused_until only ever grows, and
//	             a row is deleted once it has passed
//	dry_runs     (cluster, key)                                   PK (cluster, key)
//	             the keys of the limits in dry run (fsm.Limit.DryRun);
//	             replaced with the limits (a table, not a column of
//	             limits: tables are only ever added)
//	witness      (cluster, node_id, seen_at timestamptz,
//	              fenced boolean)                                 PK (cluster, node_id)
//	             members' last heartbeats and fences; seen_at only ever
//	             grows ('-infinity' for a member fenced before it was seen)
//
// Tables are only ever added, never altered: Open on a schema made by an
// earlier version creates the tables it lacks (caps, pauses and witness
// came later).
//
// # The pooled cursor
//
// Members in fallback that reach Postgres pool their fractions: for a key
// with rate R and burst B the pool paces, on one cursor per key, at R*F,
// where F is the sum of the fractions of unexpired registrations, with at
// most max(1, floor(B*F)) events at once. ReservePooled is one statement;
// concurrent reservations of one key serialise on the cursor's row, so any
// window of length W holds at most R*F*W + max(1, floor(B*F)) of the pool's
// slot starts (plus R*F times the delay between an answer and the use of
// its slot). A refused reservation (wait beyond maxWait) changes nothing.
// LeavePool tells the leaving member how long slots paced with its fraction
// may still lie ahead. A member reserves only on its own live registration.
//
// # Witness and fence
//
// Postgres witnesses what a member cut off from the leader may spend, so
// that the leader can take a dead member's fraction back in seconds
// instead of keeping it for the member until it is reaped. The promise: a
// member spends its fraction away from the leader only
//
//   - by pacing locally, for a licence L measured from the send time of its
//     last Witness call that succeeded and reported fenced false; or
//   - on the pooled cursor, while its registration is live and it is not
//     fenced (JoinPool is a heartbeat too, and refuses a fenced member).
//
// Fence, in one transaction, fences a member only if it looks dead to
// Postgres (no heartbeat within stale, no live registration), deletes its
// registration, and returns Wait: the leader may spend the member's
// fraction once Wait has passed from when the answer arrives, by when the
// licence of every heartbeat before the fence and every pool slot paced
// with the member's fraction is over. Heartbeats after the fence report
// fenced and give no licence; JoinPool fails with ErrFenced and
// ReservePooled with ErrNotInPool until the leader calls Unfence, before
// it gives the member a fraction again. Fence's comment has the argument
// why this holds against concurrent calls of the member.
//
// # Errors and timeouts
//
// Errors start with "pgstore: " and wrap one of the sentinels of errors.go.
// Every call gets at most Config.StatementTimeout (also set as Postgres's
// statement_timeout and lock_timeout); a Postgres that is down, unreachable
// or too slow gives ErrUnavailable within that time, never a panic or a
// hang. The error also wraps pgx's, for logs.
package pgstore
