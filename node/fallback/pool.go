package fallback

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// The pool registration outlives its last renewal by PoolTTL; a pooled
// reservation waits at most PoolMaxWait. So the pool's grants that count a
// member's fraction end by (last renewal answer + PoolTTL + PoolMaxWait +
// UseGrace): the member hands its fraction to the leader, or paces it
// locally, only after that.
const (
	PoolTTL     = 3 * time.Second
	PoolMaxWait = time.Second
)

// tendPool decides pooled or local fallback and renews the registration:
// joining when the fallback begins (or the pool was lost), renewing every
// PoolTTL/3, going local when Postgres fails.
func (fb *Fallback) tendPool(ctx context.Context) {
	fb.mu.Lock()
	m := Mode(fb.mode.Load())
	now := fb.d.Now()
	retry := m == ModeLocal || (m == ModeStopped && fb.cfg.Witnessed && !fb.departed)
	if retry && !fb.pending && now >= fb.poolFrom && fb.d.Pool.Reachable() && now-fb.lastTry > int64(5*time.Second) {
		// Postgres is back: rejoin the pool. Stop granting locally first;
		// join only once the local slots are past their use-by, or the
		// pool and this node would both spend the fraction.
		fb.lastTry = now
		fb.pending = true
	}
	if m == ModeLocal && fb.pending && now < fb.lastSlot+int64(fb.cfg.UseGrace) {
		fb.mu.Unlock()
		return // local slots still in use: join at a later tick
	}
	due := fb.pending || (m == ModePooled && now > fb.poolUntil-int64(PoolMaxWait)-int64(fb.cfg.UseGrace)-int64(PoolTTL)*2/3)
	if !due || !fb.poolable(m) {
		fb.mu.Unlock()
		return
	}
	// Counted under the lock that decided it, so a renewal that leaves
	// the pool meanwhile knows this join may register again (leavePoolNow).
	fb.joining++
	fb.joins++
	fb.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	err := fb.d.Pool.Join(cctx, fb.cfg.NodeID, fb.fraction())
	recv := fb.d.Now()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.joining--
	m = Mode(fb.mode.Load())
	if !fb.poolable(m) {
		// A renewal or a leave moved it meanwhile and bounded the pool's
		// grants by this join's TTL (leavePoolNow): the join may have
		// registered after the renewal's leave, so leave again, which
		// brings that bound down to the pool's real reach.
		if fb.joining == 0 {
			fb.leavePoolAsync()
		}
		return
	}
	if errors.Is(err, pgstore.ErrFenced) {
		fb.licence.Store(0)
		if !fb.fenced.Swap(true) {
			fb.d.Log.Error("a leader fenced this member in postgres: the pool refuses it; it spends no fallback fraction until a leader renews its share")
		}
	}
	if err == nil {
		fb.poolUntil = recv + int64(PoolTTL) + int64(PoolMaxWait) + int64(fb.cfg.UseGrace)
		fb.pending = false
		if m != ModePooled {
			fb.mode.Store(int32(ModePooled))
			fb.announce(ModePooled)
		}
		return
	}
	if !fb.poolExpiringLocked(recv) {
		return // still registered for a while: retry at the next tick
	}
	fb.poolLostLocked(err)
}

// poolable reports whether a node in mode m may (re)join the pool.
func (fb *Fallback) poolable(m Mode) bool {
	if fb.departed {
		return false
	}
	return m == ModeLocal || m == ModePooled || (m == ModeStopped && fb.cfg.Witnessed)
}

// poolExpiringLocked reports whether the registration is gone or within a
// third of its TTL of expiring. Before that, a failed call to Postgres is
// retried instead of giving up the pool.
func (fb *Fallback) poolExpiringLocked(now int64) bool {
	if Mode(fb.mode.Load()) != ModePooled {
		return true
	}
	regExpiry := fb.poolUntil - int64(PoolMaxWait) - int64(fb.cfg.UseGrace)
	return now >= regExpiry-int64(PoolTTL)/3
}

// poolLostLocked moves a pooled (or pending) node to local pacing, which
// may start only once the pool's grants counting its fraction are over.
func (fb *Fallback) poolLostLocked(err error) {
	fb.localFrom = max(fb.localFrom, fb.poolUntil)
	fb.pending = false
	if Mode(fb.mode.Load()) != ModeLocal || fb.announced != ModeLocal {
		fb.mode.Store(int32(ModeLocal))
		// With the witness, local pacing needs a live licence: advance may
		// stop the node instead (and says so).
		if fb.advanceLocked(fb.d.Now()) == ModeLocal {
			fb.d.Log.Warn("postgres pool unavailable: pacing the fallback fraction locally", "err", err,
				"local_from_in", time.Duration(max(0, fb.localFrom-fb.d.Now())))
		}
	}
}

// reservePooled reserves every want from the pool's cursors at one
// instant; lims are the wants' limits.
func (fb *Fallback) reservePooled(wants []raftpace.Want, lims []fsm.Limit, maxWait time.Duration) (raftpace.Reservation, error) {
	ctx, cancel := context.WithTimeout(fb.d.Ctx, 2*time.Second)
	defer cancel()
	pw := make([]pgstore.PoolWant, len(wants))
	for i, w := range wants {
		pw[i] = pgstore.PoolWant{Key: w.Key, Limit: lims[i], Count: w.Count}
	}
	what := raftpace.KeysOf(wants)
	sent := fb.d.Now()
	wait, err := fb.d.Pool.Reserve(ctx, pw, min(maxWait, PoolMaxWait))
	recv := fb.d.Now()
	if err != nil {
		var le *pgstore.LimitExceededError
		switch {
		case errors.As(err, &le):
			return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: le.Key, Wait: le.Wait, MaxWait: maxWait}
		case errors.Is(err, pgstore.ErrNotInPool):
			fb.mu.Lock()
			fb.pending = true // rejoin at the next tick
			fb.mu.Unlock()
			return raftpace.Reservation{}, ErrPoolPending
		case errors.Is(err, pgstore.ErrInvalid):
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w: %w", what, raftpace.ErrInvalidRequest, err)
		default:
			fb.mu.Lock()
			if fb.poolExpiringLocked(recv) {
				fb.poolLostLocked(err)
			}
			fb.mu.Unlock()
			return raftpace.Reservation{}, ErrPoolPending
		}
	}
	if recv-sent > int64(fb.cfg.UseGrace) {
		return raftpace.Reservation{}, ErrPoolPending // arrived too late to use: ask again
	}
	fb.mu.Lock()
	fb.lastSlot = max(fb.lastSlot, recv+int64(wait))
	fb.mu.Unlock()
	at := fb.d.Epoch.Add(time.Duration(recv) + wait)
	return raftpace.Reservation{At: at, UseBy: fb.d.Epoch.Add(time.Duration(sent) + wait + fb.cfg.UseGrace)}, nil
}

// joinTimeout bounds one JoinPool call (and so how long after it was sent
// a registration it makes can start).
const joinTimeout = time.Second

// leavePoolNow leaves the pool on the way back to raft and sets poolUntil
// to when the pool's grants that counted this node's fraction end (node
// clock): LeavePool deletes the registration after every reservation that
// counted it, and reports how far the pool's cursors reach, so they end by
// its answer plus that plus UseGrace, usually well before the
// registration's TTL. The caller holds fb.mu; the call is bounded by a
// sixth of ShareTTL, inside the leader's wait for the renewal answer.
//
// When it cannot say (the call failed or took too long, or a JoinPool in
// flight could register again after the delete) the TTL rule stands, from
// the latest such registration, and the leave is made again in the
// background: once it answers, poolUntil comes down to the real reach and
// the next renewal answer reports it.
func (fb *Fallback) leavePoolNow() {
	if fb.joining > 0 {
		// The join leaves again when it returns (tendPool).
		fb.poolUntil = max(fb.poolUntil, fb.d.Now()+int64(joinTimeout+PoolTTL+PoolMaxWait+fb.cfg.UseGrace))
		return
	}
	ctx, cancel := context.WithTimeout(fb.d.Ctx, fb.cfg.ShareTTL/6)
	defer cancel()
	busy, err := fb.d.Pool.LeaveBusy(ctx, fb.cfg.NodeID)
	if err != nil {
		fb.d.Log.Debug("leave pool", "err", err)
		fb.leavePoolAsync()
		return
	}
	fb.poolUntil = fb.d.Now() + int64(busy+fb.cfg.UseGrace)
}

// leavePoolAsync removes the registration in the background (it expires
// anyway) and, if no JoinPool overlapped the call, lowers poolUntil to the
// pool's reach it reports. The caller holds fb.mu.
func (fb *Fallback) leavePoolAsync() {
	clean, joins := fb.joining == 0, fb.joins
	fb.d.WG.Add(1)
	go func() {
		defer fb.d.WG.Done()
		ctx, cancel := context.WithTimeout(fb.d.Ctx, 2*time.Second)
		defer cancel()
		busy, err := fb.d.Pool.LeaveBusy(ctx, fb.cfg.NodeID)
		recv := fb.d.Now()
		if err != nil {
			fb.d.Log.Debug("leave pool", "err", err)
			return
		}
		fb.mu.Lock()
		defer fb.mu.Unlock()
		if clean && fb.joining == 0 && fb.joins == joins {
			fb.poolUntil = min(fb.poolUntil, recv+int64(busy+fb.cfg.UseGrace))
		}
	}()
}
