package node

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/internal/gcra"
)

// Mode is how a node admits events.
type Mode int32

const (
	// ModeRaft: the node holds a share promise to a leader; its callers are
	// served from the leader's grants.
	ModeRaft Mode = iota
	// ModeLocal: no leader renewed its share within ShareTTL; the node paces
	// its own callers at its fallback fraction of each key's rate.
	ModeLocal
	// ModeStopped: the node was in fallback for FallbackFor; it admits
	// nothing until a leader renews its share (so a member that may be
	// reaped has stopped spending its fraction before it is).
	ModeStopped
)

func (m Mode) String() string {
	switch m {
	case ModeRaft:
		return "raft"
	case ModeLocal:
		return "local"
	case ModeStopped:
		return "stopped"
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// fallback is a node's member side of DESIGN 5: its promise to the leader,
// its mode, and the local pacer it uses when no leader holds its share.
type fallback struct {
	n    *Node
	mode atomic.Int32

	mu        sync.Mutex
	promise   int64            // no fallback before this (node clock): s + ShareTTL
	since     int64            // fallback began
	keys      map[string]int64 // local pacer TAT per key
	lastSlot  int64            // latest fallback slot granted
	fraction  func() float64
	announced Mode
}

func newFallback(n *Node) *fallback {
	fb := &fallback{n: n, keys: make(map[string]int64)}
	fb.fraction = func() float64 { return n.ownFraction() }
	if n.cfg.Unsafe.FallbackFullRate {
		fb.fraction = func() float64 { return 1 }
	}
	fb.mode.Store(int32(ModeLocal))
	fb.announced = ModeLocal
	return fb
}

// current returns the node's mode, moving it along when a deadline passed:
// raft -> local when the promise expired, local -> stopped after FallbackFor.
func (fb *fallback) current() Mode {
	now := fb.n.now()
	m := Mode(fb.mode.Load())
	switch {
	case m == ModeRaft && now < fb.promiseAt():
		return ModeRaft
	case m == ModeLocal && now < fb.promiseAt()+int64(fb.n.cfg.FallbackFor):
		return ModeLocal
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.advanceLocked(now)
}

func (fb *fallback) promiseAt() int64 {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.promise
}

func (fb *fallback) advanceLocked(now int64) Mode {
	m := Mode(fb.mode.Load())
	if m == ModeRaft && now >= fb.promise {
		m = ModeLocal
		fb.since = now
		clear(fb.keys) // each key starts with an empty bucket: no burst
	}
	if m == ModeLocal && now >= fb.promise+int64(fb.n.cfg.FallbackFor) {
		m = ModeStopped
	}
	fb.mode.Store(int32(m))
	if m != fb.announced {
		fb.announce(m)
	}
	return m
}

func (fb *fallback) announce(m Mode) {
	prev := fb.announced
	fb.announced = m
	switch m {
	case ModeLocal:
		fb.n.log.Warn("no leader renewed this node's share: pacing locally at its fallback fraction",
			"from", prev.String(), "fraction", fb.fraction(), "stop_after", fb.n.cfg.FallbackFor)
	case ModeStopped:
		fb.n.log.Error("fallback budget exhausted: admitting nothing until a leader renews this node's share",
			"from", prev.String(), "in_fallback_for", fb.n.cfg.FallbackFor)
	case ModeRaft:
		fb.n.log.Info("share renewed by the leader: admitting through raft", "from", prev.String())
	}
}

// renew answers a leader's renewal: no fallback before now + ShareTTL. A
// node in fallback stops granting from it at once and reports how far its
// fallback slots still reach (plus the grace to use them).
func (fb *fallback) renew() shareAnswer {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.n.now()
	var busy int64
	if Mode(fb.mode.Load()) != ModeRaft || now >= fb.promise {
		if end := fb.lastSlot + int64(fb.n.cfg.UseGrace); end > now {
			busy = end - now
		}
	}
	fb.promise = now + int64(fb.n.cfg.ShareTTL)
	fb.mode.Store(int32(ModeRaft))
	if fb.announced != ModeRaft {
		fb.announce(ModeRaft)
	}
	return shareAnswer{Applied: fb.n.state.AppliedIndex(), Fraction: fb.fraction(), Busy: time.Duration(busy)}
}

// reserve paces count events of key locally at this node's fraction of
// the key's rate, with its share of the burst (at least one).
func (fb *fallback) reserve(key string, count int, maxWait time.Duration) (Reservation, error) {
	lim, ok := fb.n.state.Limit(key)
	if !ok {
		return Reservation{}, fmt.Errorf("node: reserve %q: %w", key, ErrUnknownKey)
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.n.now()
	if m := fb.advanceLocked(now); m != ModeLocal {
		if m == ModeStopped {
			return Reservation{}, fmt.Errorf("node: reserve %q: %w", key, ErrStopped)
		}
		return Reservation{}, errNotLeader // back in raft mode: go through the leader
	}
	f := fb.fraction()
	if f <= 0 {
		// No fraction of its own (a new member): only the leader's grants
		// can serve it, and those are always safe to use.
		return Reservation{}, errNotLeader
	}
	burst := max(1, int(math.Floor(f*float64(lim.Burst))))
	interval := int64(math.Ceil(float64(lim.Interval()) / f))
	p := gcra.NewParams(interval, burst)
	tat, ok := fb.keys[key]
	if !ok {
		tat = now
	}
	start, next, err := gcra.Reserve(tat, p, now, count)
	if err != nil {
		return Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, ErrInvalidRequest, err)
	}
	if time.Duration(start-now) > maxWait {
		return Reservation{}, &LimitExceededError{Key: key, Wait: time.Duration(start - now), MaxWait: maxWait}
	}
	fb.keys[key] = next
	fb.lastSlot = max(fb.lastSlot, start)
	at := fb.n.epoch.Add(time.Duration(start))
	return Reservation{At: at, UseBy: at.Add(fb.n.cfg.UseGrace)}, nil
}

// watch moves the mode along on time, so transitions are logged when they
// happen rather than at the next reservation.
func (fb *fallback) watch(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fb.current()
		}
	}
}

// ownFraction is this node's committed fallback fraction.
func (n *Node) ownFraction() float64 {
	for _, m := range n.state.Members() {
		if m.ID == n.cfg.NodeID {
			return m.Fraction
		}
	}
	return 0
}
