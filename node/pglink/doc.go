// Package pglink is a raftpace node's optional link to Postgres (DESIGN 6):
// the checkpoint the leader writes, the restore of a cluster started with
// empty data dirs, address publishing for discovery, and the calls of the
// pooled fallback and of the witness (heartbeat, fence, unfence). The
// storage itself is package internal/pgstore's; this package decides when
// to call it and what to do with the answer.
//
// It is named for the link, not the checkpoint: the checkpoint is its
// main job, but discovery, the pool and the witness reach Postgres through
// it too, over the one store it opens.
//
// # What it promises
//
// The checkpoint is a floor for a fresh cluster, never a source of truth
// for a running one: a leader writes it (every CheckpointEvery and soon
// after every change of limits, members or pauses), and only a leader that
// heads a cluster started with empty data dirs reads it back. Restore comes
// before granting: such a leader restores horizons first (so no key can
// start before the old cluster's last grants), then limits, concurrency
// caps and refusal pauses, and grants nothing until the restore succeeded
// or leadership moved on; meanwhile no checkpoint is written over the one
// it needs. A restored pause ends no earlier than the old cluster's.
//
// Postgres down never stops the fleet: the link opens in the background
// and reopens after failures; what its calls find is logged once each time
// it changes, the first time included ("postgres reachable", "postgres
// unreachable", and at error level "postgres refuses this node's
// statements" for a database missing or a user refused). Nothing waits on it except
// the one thing that must, a fresh cluster's restore (it grants nothing for
// keys it does not know, so waiting is safe).
//
// Errors and log lines are the node's: they say "node:", as they did when
// this was part of package node.
//
// # What it may depend on
//
// Packages fsm (the state it checkpoints and the commands it restores
// with), internal/pgstore (the store) and internal/loop (the shape of its
// loop).
// It does not import node: its node gives it, in Deps, the applied state
// and the fsm adapter's horizons and pauses, the pacer's horizons, whether
// the node grants, the pause lock the restore shares with the gate, the
// node's commit through raft and its limit commit, a clock, a logger, its
// addresses, and the node's context (the node runs Loop in its own
// goroutine).
package pglink
