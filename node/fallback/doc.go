// Package fallback is a raftpace member's side of the share lease
// (node/DESIGN.md, "Shares and fallback", DESIGN 5 and 9): its promise to
// the leader, its mode, and what it admits on its own when no leader holds
// its share.
//
// # What it promises
//
// A member holds a fraction f of every key's rate. At any moment exactly
// one side spends it: the leader while it holds the member's share lease,
// the member itself once the lease has lapsed. The modes and their
// transitions (Mode):
//
//   - raft -> local (or pooled): when no leader renewed the share for
//     ShareTTL. A renewal answered at s promises no fallback before
//     s + ShareTTL, and the leader counts the share only for slots before
//     q + ShareTTL (q <= s, when it sent the renewal), so the two never
//     overlap. A starting node keeps the promise as if renewed at its start
//     (it may have made one before a crash), and spends no fraction until a
//     leader renewed it once since it started (its stored fraction may be
//     one it already handed back). Each key's local pacer starts afresh
//     when a fallback begins (nothing carries over from an earlier one),
//     but no earlier than the key's overrun after the promise ended: a
//     leader's last grant of a slow key may claim its rate that long
//     (wire.ShareOverrun; 0 for keys faster than about one event per
//     ShareTTL/3 of this node's fraction).
//   - local or pooled -> stopped: after FallbackFor past the promise,
//     without the witness. The leader reaps a silent member only after
//     ShareTTL + FallbackFor + ReapMargin, so it has stopped spending by
//     then. With the witness (Config.Witnessed) there is no FallbackFor:
//     local pacing lasts only within the licence of the last heartbeat
//     Postgres accepted unfenced (sent + WitnessTTL), and a leader takes the
//     fraction back only by fencing the member there first and waiting out
//     that licence; stopped returns to local when a heartbeat renews the
//     licence.
//   - local <-> pooled: with Postgres, a member in fallback first tries the
//     pool (admitting nothing meanwhile, so the pool and the local pacer
//     never both spend f), or paces locally first while a slow key's
//     overrun lasts (the pool paces every key at once); it rejoins from local only once its local slots
//     are past their use-by; it goes local when the pool is lost, and then
//     paces only from the end of the pool's grants that counted f
//     (registration + PoolTTL + PoolMaxWait + UseGrace).
//   - any -> raft: on a renewal (Renew), at once. The answer reports how
//     far the member's fallback grants (local slots plus UseGrace,
//     concurrency slots, the pool's grants) still reach (Busy): the leader
//     counts the share only from the answer's arrival plus that.
//   - any -> stopped for good: on Depart (the node leaves the cluster),
//     which returns the same reach; Undepart after a Leave that failed.
//
// Local pacing is a GCRA at f times the key's rate, with
// max(1, floor(f*Burst)) of the burst; concurrency slots in fallback come
// from floor(f*Cap), only from MaxSlotTTL into fallback (every slot the
// leader granted before has expired), and end by the time fallback stops.
// A key this node has no limit for is never admitted in fallback.
//
// Errors and log lines are the node's: they say "node:", as they did when
// this was part of package node.
//
// # What it may depend on
//
// Packages raftpace (Reservation, Slot and the errors a request ends in),
// fsm (Limit), internal/gcra (the local pacer), internal/pgstore (the
// errors of the pool and witness) and node/wire (the share answer and
// ErrNotLeader). It does not import node: its node gives it, in Config,
// the values of its configuration it reads, and, in Deps, a clock and its
// epoch, a logger, the limits and caps it applied, its committed fraction,
// its lifetime, and the calls to Postgres (Pool) as functions; the link to
// Postgres stays the node's. Time comes only from Deps.Now (Watch and
// HeartbeatLoop tick on real timers but decide on Now), so every
// transition is tested on a fake clock.
package fallback
