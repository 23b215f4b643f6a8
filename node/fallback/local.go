package fallback

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/node/wire"
)

// HeartbeatLoop runs with the witness: every WitnessTTL/3 it tells Postgres
// this node is alive and learns whether a leader fenced it. A heartbeat sent
// at q and accepted unfenced licenses local pacing until q + WitnessTTL:
// Postgres recorded it at some p >= q, and a leader fencing this node waits
// until p + WitnessTTL, measured from after the fence on Postgres's clock.
func (fb *Fallback) HeartbeatLoop(ctx context.Context) {
	every := fb.cfg.WitnessTTL / 3
	beat := func() bool {
		sent := fb.d.Now()
		cctx, cancel := context.WithTimeout(ctx, every)
		fenced, err := fb.d.Pool.Heartbeat(cctx, fb.cfg.NodeID)
		cancel()
		if err == nil {
			fb.heard(sent, fenced)
		}
		return true
	}
	beat() // at once: a starting node's licence begins with its first heartbeat
	loop.Every(ctx, every, nil, beat)
}

// heard records a heartbeat sent at sent that Postgres answered.
func (fb *Fallback) heard(sent int64, fenced bool) {
	if fenced {
		fb.licence.Store(0)
		if !fb.fenced.Swap(true) {
			fb.d.Log.Error("a leader fenced this member in postgres (it was silent): it spends no fallback fraction until a leader renews its share and lifts the fence")
		}
		return
	}
	if fb.fenced.Swap(false) {
		fb.d.Log.Info("the fence on this member in postgres was lifted")
	}
	if l := sent + int64(fb.cfg.WitnessTTL); l > fb.licence.Load() {
		fb.licence.Store(l)
	}
}

// Reserve paces count events of key locally at this node's fraction of
// the key's rate, with its share of the burst (at least one).
func (fb *Fallback) Reserve(key string, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	lim, ok := fb.d.State.Limit(key)
	if !ok {
		// This node may not have applied the limit yet: only the leader
		// can say the key is unknown. If no leader answers, the caller
		// gets ErrNoLeader; fallback never admits a key it has no rate for.
		return raftpace.Reservation{}, wire.ErrNotLeader
	}
	fb.mu.Lock()
	now := fb.d.Now()
	m := fb.advanceLocked(now)
	switch {
	case m == ModeStopped:
		fb.mu.Unlock()
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w", key, raftpace.ErrStopped)
	case m == ModeRaft:
		fb.mu.Unlock()
		return raftpace.Reservation{}, wire.ErrNotLeader // back in raft mode: go through the leader
	case fb.pending:
		fb.mu.Unlock()
		return raftpace.Reservation{}, ErrPoolPending
	case m == ModePooled:
		fb.mu.Unlock()
		return fb.reservePooled(key, lim, count, maxWait)
	}
	defer fb.mu.Unlock()
	f := fb.fraction()
	if f <= 0 {
		// No fraction of its own (a new member): only the leader's grants
		// can serve it, and those are always safe to use.
		return raftpace.Reservation{}, wire.ErrNotLeader
	}
	burst := max(1, int(math.Floor(f*float64(lim.Burst))))
	interval := int64(math.Ceil(float64(lim.Interval()) / f))
	p := gcra.NewParams(interval, burst)
	tat, ok := fb.keys[key]
	if !ok {
		// A leader's last grants may claim the key up to its overrun past
		// the lapse (wire.ShareOverrun; 0 unless the key is slow).
		tat = max(now, fb.lapsed+fb.overrun(lim, f))
	}
	// After the pool was lost, nothing before the pool's grants that
	// counted this fraction are surely over.
	tat = max(tat, fb.localFrom+p.Tolerance)
	start, next, err := gcra.Reserve(tat, p, now, count)
	if err != nil {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
	}
	if lic := fb.licence.Load(); fb.cfg.Witnessed && start >= lic {
		// A leader may count this fraction from the licence's end on.
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: cut off from the leader and from postgres; local pacing is licensed only until %v after the last heartbeat postgres accepted",
			key, raftpace.ErrStopped, fb.cfg.WitnessTTL)
	}
	if time.Duration(start-now) > maxWait {
		return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(start - now), MaxWait: maxWait}
	}
	fb.keys[key] = next
	fb.lastSlot = max(fb.lastSlot, start)
	at := fb.d.Epoch.Add(time.Duration(start))
	return raftpace.Reservation{At: at, UseBy: at.Add(fb.cfg.UseGrace)}, nil
}

// Watch moves the mode along on time, so transitions are logged when they
// happen rather than at the next reservation.
func (fb *Fallback) Watch(ctx context.Context) {
	loop.Every(ctx, 100*time.Millisecond, nil, func() bool {
		if fb.Current() != ModeRaft && fb.d.Pool != nil {
			fb.tendPool(ctx)
		}
		return true
	})
}
