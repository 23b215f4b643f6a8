package node

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// The refusal gate: when a remote side refuses (429, 503) and says when to
// come back, one worker records a pause for the key and every worker in the
// fleet holds off until it ends.
//
// A pause is replicated through raft as a duration, measured by each node
// from its own apply of the entry (fsm.SetPause), so no host's wall clock
// is trusted and a follower's pause ends no earlier than the leader's. It is
// an atomic maximum: the leader serialises every pause under one lock and
// proposes a new entry only when the hint reaches past the deadline already
// in force, so a shorter hint arriving later never shortens a longer pause,
// and of two concurrent hints the later deadline stays. An expired pause is
// cleared by the leader (an entry with For 0), so a snapshot restored later
// does not resurrect it.
//
// The node that records a pause holds its own callers off at once, before
// the entry commits, and keeps doing so if no leader can be reached: the
// caller hears about the failure, and this node at least obeys the refusal
// it saw.

// deadlines maps keys to deadlines on the node's clock. It is copy on
// write: Reserve reads it on every reservation without a lock (and, while
// nothing is paused, reads only a nil pointer); writers, which are rare,
// serialise on mu.
type deadlines struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]int64]
}

// get returns key's deadline, if it has one.
func (d *deadlines) get(key string) (int64, bool) {
	m := d.m.Load()
	if m == nil {
		return 0, false
	}
	end, ok := (*m)[key]
	return end, ok
}

// all returns a copy of every deadline.
func (d *deadlines) all() map[string]int64 {
	if m := d.m.Load(); m != nil {
		return maps.Clone(*m)
	}
	return map[string]int64{}
}

// update applies f to a copy of the map and publishes the copy (nil when
// it ends up empty, keeping the read cheap).
func (d *deadlines) update(f func(m map[string]int64)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := d.all()
	f(next)
	if len(next) == 0 {
		d.m.Store(nil)
		return
	}
	d.m.Store(&next)
}

// extend moves key's deadline to end if that is later, and forgets the
// deadlines that passed before now.
func (d *deadlines) extend(key string, end, now int64) {
	d.update(func(m map[string]int64) {
		maps.DeleteFunc(m, func(_ string, e int64) bool { return e <= now })
		m[key] = max(m[key], end)
	})
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
	if err := fsm.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("node: pause: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if d <= 0 || d > fsm.MaxPause {
		return 0, fmt.Errorf("node: pause %q: %w: duration %v must be in (0, %v]", key, raftpace.ErrInvalidRequest, d, fsm.MaxPause)
	}
	now := n.now()
	n.pausedHere.extend(key, now+int64(d), now)
	what := fmt.Sprintf("pause %q", key)
	var remaining time.Duration
	var index uint64
	err := n.untilDone(ctx, what, func() (err error) {
		remaining, index, err = n.pauseOnce(ctx, what, key, d)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%w (this node holds off for %v anyway)", err, d)
	}
	if index > 0 {
		if err := n.waitApplied(ctx, index); err != nil {
			return remaining, err
		}
	}
	return remaining, nil
}

func (n *Node) pauseOnce(ctx context.Context, what, key string, d time.Duration) (time.Duration, uint64, error) {
	if n.leading() {
		return n.leaderPause(key, d)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := n.callLeader(cctx, what, wire.MethodPause, wire.PauseReq{Key: key, For: d}.Encode())
	if err != nil {
		return 0, 0, err
	}
	resp, err := wire.DecodePauseResp(raw)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	if err := leaderErr(what, resp.Code, resp.Msg); err != nil {
		return 0, 0, err
	}
	return resp.Remaining, resp.Index, nil
}

// leaderPause is the atomic maximum. pauseMu is held across the commit, so
// the deadline read here includes every earlier pause; the commit returns
// only once this node applied the entry.
func (n *Node) leaderPause(key string, d time.Duration) (time.Duration, uint64, error) {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	now := n.now()
	if end, ok := n.fsm.pauses.get(key); ok && end >= now+int64(d) {
		return time.Duration(end - now), 0, nil // a longer pause is in force
	}
	index, err := n.commit(&fsm.SetPause{Key: key, For: d}, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	n.stats.pauses.Add(1)
	n.log.Info("key paused for the fleet", "key", key, "for", d)
	return d, index, nil
}

// clearExpiredPauses removes pauses that ended on the leader's clock.
// Followers measured theirs from a later apply, so this ends them at most
// their replication lag early, never before the leader's deadline.
func (n *Node) clearExpiredPauses() {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	now := n.now()
	for key, end := range n.fsm.pauses.all() {
		if end > now {
			continue
		}
		if _, err := n.commit(&fsm.SetPause{Key: key, For: 0}, 5*time.Second); err != nil {
			n.log.Debug("clearing an expired pause failed; will retry", "key", key, "err", err)
			return
		}
	}
}

// PausedFor returns key's remaining pause on this node; 0 if none.
func (n *Node) PausedFor(key string) time.Duration {
	now := n.now()
	end, _ := n.fsm.pauses.get(key)
	if here, ok := n.pausedHere.get(key); ok {
		end = max(end, here)
	}
	if end <= now {
		return 0
	}
	return time.Duration(end - now)
}

// Pauses returns every key's remaining pause on this node.
func (n *Node) Pauses() map[string]time.Duration {
	now := n.now()
	out := make(map[string]time.Duration)
	for key, end := range maxEnds(n.fsm.pauses.all(), n.pausedHere.all()) {
		if end > now {
			out[key] = time.Duration(end - now)
		}
	}
	return out
}

func maxEnds(a, b map[string]int64) map[string]int64 {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] = max(out[k], v)
	}
	return out
}

// gate holds a reservation of key while it is paused, or returns a
// *PausedError when the pause outlasts maxWait. Nothing is consumed.
func (n *Node) gate(ctx context.Context, key string, maxWait time.Duration) error {
	start := time.Now()
	for {
		p := n.PausedFor(key)
		if p <= 0 {
			return nil
		}
		if p > maxWait-time.Since(start) {
			return &raftpace.PausedError{Key: key, Remaining: p, MaxWait: maxWait}
		}
		if err := sleepCtx(ctx, n.ctx, p); err != nil {
			return fmt.Errorf("node: reserve %q: waiting out its pause: %w", key, err)
		}
	}
}
