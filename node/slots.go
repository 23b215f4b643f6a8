package node

import (
	"context"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/node/slots"
	"github.com/raftpace/raftpace/node/wire"
)

// Concurrency caps live in package node/slots (its doc says what they
// promise). Here is the node's side of them: what the slots are given,
// the seam with the node's fallback, the leader's housekeeping loop, and
// the node's methods that hand on to them.

// newSlots builds the node's slots. Everything it is given is read through
// n when called.
func (n *Node) newSlots() *slots.Slots {
	return slots.New(slots.Deps{
		NodeID:     n.cfg.NodeID,
		MaxSlotTTL: n.cfg.MaxSlotTTL,
		State:      n.state,
		View:       n.slotView,
		Unheld:     func(now int64) []float64 { return n.shares.Unheld(now) },
		Fallback:   slotFallback{n},
		Now:        n.now,
		Log:        n.log,
		Count: slots.Counters{
			Acquired: &n.stats.slotsAcquired,
			Refused:  &n.stats.slotsRefused,
			Released: &n.stats.slotsReleased,
			Expired:  &n.stats.slotsExpired,
		},
		Outcome:    n.slotsAcquired,
		Ctx:        n.ctx,
		WG:         &n.wg,
		Sleep:      func(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, n.ctx, d) },
		Commit:     n.commitNow,
		Leading:    n.leading,
		Granting:   func() bool { return n.pacer.IsLeading() },
		LeaderAddr: func() string { addr, _ := n.raft.LeaderWithID(); return string(addr) },
		Call: func(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error) {
			return n.trans.Call(ctx, addr, method, req)
		},
		LeaderErr:      wire.LeaderErr,
		UntilDone:      n.lc.UntilDone,
		IndexOnLeader:  n.lc.IndexOnLeader,
		CommitOnLeader: n.lc.CommitOnLeader,
		Retryable:      wire.Retryable,
	})
}

// slotView is the fsm adapter's held slots as the slots package reads them.
func (n *Node) slotView() (map[string]slots.Held, <-chan struct{}) {
	held, ch := n.fsm.Slots()
	out := make(map[string]slots.Held, len(held))
	for id, s := range held {
		out[id] = slots.Held(s)
	}
	return out, ch
}

// slotFallback is the seam between the slots and the node's fallback
// (fallback.go): while the node has lost its leader and holds a fraction,
// slots are granted from that fraction of the caps.
type slotFallback struct{ n *Node }

func (f slotFallback) Active() bool {
	return f.n.fallback.Current() != ModeRaft && f.n.ownFraction() > 0
}

func (f slotFallback) Acquire(id string, keys []string, ttl time.Duration) (raftpace.Slot, []string, error) {
	return f.n.fallback.AcquireSlots(id, keys, ttl)
}

func (f slotFallback) Release(id string)              { f.n.fallback.ReleaseSlot(id) }
func (f slotFallback) InUse(now int64) map[string]int { return f.n.fallback.LocalSlotsInUse(now) }

// maintainLoop runs the leader's housekeeping of the gate and the caps:
// clearing expired pauses and reclaiming expired slots.
func (n *Node) maintainLoop() {
	defer n.wg.Done()
	loop.Every(n.ctx, 250*time.Millisecond, nil, func() bool {
		if !n.pacer.IsLeading() {
			return true
		}
		n.gate.ClearExpired()
		n.slots.Reap()
		return true
	})
}

// AcquireSlots takes one slot on each of keys at once (all or nothing) for
// at most ttl (at most Config.MaxSlotTTL), waiting up to maxWait for room
// under every key's cap. Past maxWait it returns a *ConcurrencyLimitError;
// a key without a cap gives ErrUnknownKey. Waiting callers are not served
// in order.
func (n *Node) AcquireSlots(ctx context.Context, keys []string, ttl, maxWait time.Duration) (raftpace.Slot, error) {
	return n.slots.Acquire(ctx, keys, ttl, maxWait)
}

// ReleaseSlot gives the slot back. Releasing twice, or after the slot
// expired, is a no-op. If no leader answers before ctx ends, the slot is
// reclaimed at its deadline anyway.
func (n *Node) ReleaseSlot(ctx context.Context, s raftpace.Slot) error {
	return n.slots.Release(ctx, s)
}

// SetCap sets key's fleet-wide concurrency cap (1..fsm.MaxCap) for the
// whole cluster. When it returns, this node has applied it.
func (n *Node) SetCap(ctx context.Context, key string, max int) error {
	return n.slots.SetCap(ctx, key, max)
}

// DeleteCap removes key's cap: AcquireSlots on it then fails with
// ErrUnknownKey. Slots held stay until released or expired.
func (n *Node) DeleteCap(ctx context.Context, key string) error {
	return n.slots.DeleteCap(ctx, key)
}

// Cap returns key's cap as this node applied it, or ErrUnknownKey.
func (n *Node) Cap(ctx context.Context, key string) (int, error) { return n.slots.Cap(ctx, key) }

// Caps returns every cap, as this node applied them.
func (n *Node) Caps(ctx context.Context) (map[string]int, error) { return n.slots.Caps(ctx) }

// SlotsInUse returns, per key with a cap, the slots held as this node
// measures them (raft-granted slots not yet expired, plus this node's own
// fallback slots).
func (n *Node) SlotsInUse() map[string]int { return n.slots.InUse() }
