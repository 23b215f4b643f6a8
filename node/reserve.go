package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/lease"
	"github.com/raftpace/raftpace/node/wire"
)

// Reserve asks for count events of key. If the wait would exceed maxWait it
// consumes nothing and returns a *LimitExceededError. It works on any node.
// Single events are served from the node's leases (runs of slots the leader
// granted ahead of need, see package node/lease) unless DisableLeases is
// set; larger counts, and every request with leases disabled, go to the
// leader one by one (forwarded by a follower), retried within maxWait when
// a grant arrives too late to be used within UseGrace.
//
// A limit in dry run (fsm.Limit.DryRun) is asked for a slot now; the event
// goes at once whatever it answers (report.OutcomeDryRun counts those it
// had none for). The refusal gate holds such a key as any other.
func (n *Node) Reserve(ctx context.Context, key string, count int, maxWait time.Duration) (r raftpace.Reservation, err error) {
	if err := fsm.ValidateEventKey(key); err != nil {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if count < 1 {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: count %d must be at least 1", key, raftpace.ErrInvalidRequest, count)
	}
	if maxWait < 0 {
		maxWait = 0
	}
	begin := time.Now()
	deadline := begin.Add(maxWait)
	lim, _ := n.state.Limit(key)
	limitDeadline := deadline // what the limit may wait for: a dry run asks for a slot now
	if lim.DryRun {
		limitDeadline = begin
	}
	defer func() {
		if n.reserved(key, count, begin, r, err, lim.DryRun) { // admitted by the dry run
			r, err = raftpace.Reservation{At: time.Now(), UseBy: time.Now().Add(n.cfg.UseGrace)}, nil
		}
	}()
	for {
		if n.closed() {
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		if n.departing.Load() {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w (leaving the cluster)", key, raftpace.ErrClosed)
		}
		if err := n.gate.Wait(ctx, key, max(0, time.Until(deadline))); err != nil {
			return raftpace.Reservation{}, err
		}
		if n.fallback.Current() != ModeRaft {
			r, err := n.fallback.Reserve(key, count, time.Until(limitDeadline))
			switch {
			case errors.Is(err, errPoolPending):
				if err := sleepCtx(ctx, n.ctx, 20*time.Millisecond); err != nil {
					return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w", key, err)
				}
				continue
			case !errors.Is(err, wire.ErrNotLeader):
				if err == nil {
					n.stats.fallbackGrants.Add(1)
				}
				return r, err
			}
		}
		r, err := n.reserveRaft(ctx, key, count, max(0, time.Until(limitDeadline)))
		if errors.Is(err, lease.ErrModeChanged) || errors.Is(err, errLeaderPaused) {
			continue // dispatch again: the node fell back, or the gate now holds the pause
		}
		return r, err
	}
}

// wouldWait reports whether err says a limit had no slot for a reservation
// now (a wait too long, or no leader to ask at once), as opposed to a
// pause, a bad request or a closing node.
func wouldWait(err error) bool {
	var pe *raftpace.PausedError
	return (errors.Is(err, raftpace.ErrLimitExceeded) && !errors.As(err, &pe)) || errors.Is(err, raftpace.ErrNoLeader)
}

// inFallback reports whether the node should stop retrying the leader and
// serve its callers from its own fallback.
func (n *Node) inFallback() bool {
	return n.fallback.Current() != ModeRaft && n.ownFraction() > 0
}

// reserveRaft serves a reservation through the leader: from the node's
// leases, or one request per reservation.
func (n *Node) reserveRaft(ctx context.Context, key string, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	if count == 1 && !n.cfg.DisableLeases {
		return n.leases.Reserve(ctx, key, maxWait)
	}
	begin := time.Now()
	backoff := retryBackoffMin
	var lastErr error
	for {
		if n.closed() {
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		remaining := maxWait - time.Since(begin)
		if remaining < 0 && lastErr == nil {
			// The first attempt is always made (with maxWait 0 the clock
			// has moved past it before the first look): it may be served
			// without waiting.
			remaining = 0
		}
		if remaining < 0 {
			// Retries (no leader, leader change, late grants) used up the
			// caller's maximum wait: say why, not "limit exceeded".
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w within max wait %v: %w", key, raftpace.ErrNoLeader, maxWait, lastErr)
		}
		sent := time.Now()
		wait, held, err := n.pacer.Reserve(ctx, n.ctx.Done(), key, count, remaining)
		if errors.Is(err, wire.ErrNotLeader) {
			sent = time.Now()
			wait, held, err = n.forwardReserve(ctx, key, count, remaining)
		}
		if err == nil {
			// The leader meant the slot for (its grant time + wait), and its
			// grant time is at least held after sent; here it can only be
			// placed from arrival, so it may be up to the network's part of
			// the round trip late.
			arrived := time.Now()
			held = min(held, arrived.Sub(sent))
			r := raftpace.Reservation{At: arrived.Add(wait), UseBy: sent.Add(held + wait + n.cfg.UseGrace)}
			if !r.UseBy.Before(r.At) {
				return r, nil
			}
			n.stats.lateGrants.Add(1)
			n.log.Warn("grant arrived too late to use; asking again", "key", key, "round_trip", arrived.Sub(sent), "use_grace", n.cfg.UseGrace)
			lastErr = fmt.Errorf("grant arrived after %v, past its use-by", arrived.Sub(sent))
			continue
		}
		if !retryable(err) {
			return raftpace.Reservation{}, err
		}
		if n.inFallback() {
			return raftpace.Reservation{}, lease.ErrModeChanged
		}
		lastErr = err
		n.log.Debug("reserve: retrying", "key", key, "err", err)
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrNoLeader, err)
		}
		backoff = nextBackoff(backoff)
	}
}

// Forfeit records that a caller dropped a reservation it could not use by
// its UseBy (for the node's counters).
func (n *Node) Forfeit(raftpace.Reservation) { n.stats.forfeited.Add(1) }

// forwardReserve asks the leader for count events of key by the one path
// to the leader (leadercall.go).
func (n *Node) forwardReserve(ctx context.Context, key string, count int, maxWait time.Duration) (wait, held time.Duration, err error) {
	what := fmt.Sprintf("reserve %q", key)
	var resp wire.ReserveResp
	err = n.callLeaderWithin(ctx, what, wire.MethodReserve, wire.ReserveReq{Key: key, Count: count, MaxWait: maxWait}.Encode(), maxWait, func(raw []byte) (err error) {
		resp, err = wire.DecodeReserveResp(raw)
		return err
	})
	if err == nil {
		err = n.grantErr(what, key, resp.Code, resp.Wait, maxWait, resp.Msg)
	}
	if err != nil {
		return 0, 0, err
	}
	return resp.Wait, resp.Held, nil
}
