package node

import (
	"context"
	"time"

	"github.com/raftpace/raftpace/node/gate"
	"github.com/raftpace/raftpace/node/wire"
)

// The refusal gate lives in package node/gate (its doc says what it
// promises). Here is the node's side of it: what the gate is given, and
// the node's methods that hand on to it.

// newGate builds the node's gate. It needs n.fsm; everything else it reads
// through n when called.
func (n *Node) newGate() *gate.Gate {
	return gate.New(gate.Deps{
		Applied:     &n.appliedPauses,
		Mu:          &n.pauseMu,
		Now:         n.now,
		Log:         n.log,
		Pauses:      &n.stats.pauses,
		Commit:      n.commitNow,
		Leading:     n.leading,
		CallLeader:  n.lc.Call,
		LeaderErr:   wire.LeaderErr,
		UntilDone:   n.lc.UntilDone,
		WaitApplied: n.waitApplied,
		Sleep:       func(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, n.ctx, d) },
	})
}

// errLeaderPaused: the leader refused a grant because the key is paused.
// The node has recorded the pause locally; Reserve checks its gate again.
var errLeaderPaused = gate.ErrLeaderPaused

// leaderPaused records a pause the leader reported and returns
// errLeaderPaused.
func (n *Node) leaderPaused(key string, remaining time.Duration) error {
	return n.gate.LeaderPaused(key, remaining)
}

// Pause records a refusal of key for d: no event of key is admitted by any
// node of the fleet until the pause ends. If a longer pause is already in
// force it stays; Pause returns the remaining pause in force after the call
// (as the leader measured it). d must be in (0, fsm.MaxPause].
//
// When Pause returns nil, every later Reserve on this node sees the pause,
// and every other node sees it once it applies the entry (milliseconds).
// On an error (no leader before ctx ended) this node still holds its own
// callers off for d.
func (n *Node) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	return n.gate.Pause(ctx, key, d)
}

// PausedFor returns key's remaining pause on this node; 0 if none.
func (n *Node) PausedFor(key string) time.Duration { return n.gate.PausedFor(key) }

// Pauses returns every key's remaining pause on this node.
func (n *Node) Pauses() map[string]time.Duration { return n.gate.Pauses() }
