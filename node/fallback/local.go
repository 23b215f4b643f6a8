package fallback

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
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

// ReserveAll paces the events of every want locally at this node's
// fraction of each key's rate, with its share of each burst (at least
// one), at one instant that satisfies every key (as the leader's pacer
// does), or none.
func (fb *Fallback) ReserveAll(wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error) {
	what := raftpace.KeysOf(wants)
	lims := make([]fsm.Limit, len(wants))
	for i, w := range wants {
		lim, ok := fb.d.State.Limit(w.Key)
		if !ok {
			// This node may not have applied the limit yet: only the leader
			// can say the key is unknown. If no leader answers, the caller
			// gets ErrNoLeader; fallback never admits a key it has no rate for.
			return raftpace.Reservation{}, wire.ErrNotLeader
		}
		if lim.Quota != 0 {
			// A quota is counted by the leader only (package pacer): no
			// member knows what the others and the last leader granted of
			// its window, so none may spend it alone.
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: its quota is counted by the leader only, and this member is in fallback", w.Key, raftpace.ErrNoLeader)
		}
		lims[i] = lim
	}
	fb.mu.Lock()
	now := fb.d.Now()
	m := fb.advanceLocked(now)
	switch {
	case m == ModeStopped:
		fb.mu.Unlock()
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w", what, raftpace.ErrStopped)
	case m == ModeRaft:
		fb.mu.Unlock()
		return raftpace.Reservation{}, wire.ErrNotLeader // back in raft mode: go through the leader
	case fb.pending:
		fb.mu.Unlock()
		return raftpace.Reservation{}, ErrPoolPending
	case m == ModePooled:
		fb.mu.Unlock()
		return fb.reservePooled(wants, lims, maxWait)
	}
	defer fb.mu.Unlock()
	f := fb.fraction()
	if f <= 0 {
		// No fraction of its own (a new member): only the leader's grants
		// can serve it, and those are always safe to use.
		return raftpace.Reservation{}, wire.ErrNotLeader
	}
	// Each key's own earliest start; the latest of them is the instant.
	params := make([]gcra.Params, len(wants))
	tats := make([]int64, len(wants))
	at, last := now, 0
	for i, w := range wants {
		lim := lims[i]
		burst := max(1, int(math.Floor(f*float64(lim.Burst))))
		interval := int64(math.Ceil(float64(lim.Interval()) / f))
		params[i] = gcra.NewParams(interval, burst)
		tat, ok := fb.keys[w.Key]
		if !ok {
			// A leader's last grants may claim the key up to its overrun past
			// the lapse (wire.ShareOverrun; 0 unless the key is slow).
			tat = max(now, fb.lapsed+fb.overrun(lim, f))
		}
		// After the pool was lost, nothing before the pool's grants that
		// counted this fraction are surely over.
		tats[i] = max(tat, fb.localFrom+params[i].Tolerance)
		start, _, err := gcra.Reserve(tats[i], params[i], now, w.Count)
		if err != nil {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", w.Key, raftpace.ErrInvalidRequest, err)
		}
		if start > at {
			at, last = start, i
		}
	}
	if lic := fb.licence.Load(); fb.cfg.Witnessed && at >= lic {
		// A leader may count this fraction from the licence's end on.
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w: cut off from the leader and from postgres; local pacing is licensed only until %v after the last heartbeat postgres accepted",
			what, raftpace.ErrStopped, fb.cfg.WitnessTTL)
	}
	if time.Duration(at-now) > maxWait {
		return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: wants[last].Key, Wait: time.Duration(at - now), MaxWait: maxWait}
	}
	for i, w := range wants {
		// Arriving at the instant: every key starts there (it is at least
		// each key's own earliest start).
		_, next, _ := gcra.Reserve(tats[i], params[i], at, w.Count)
		fb.keys[w.Key] = next
	}
	fb.lastSlot = max(fb.lastSlot, at)
	start := fb.d.Epoch.Add(time.Duration(at))
	return raftpace.Reservation{At: start, UseBy: start.Add(fb.cfg.UseGrace)}, nil
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
