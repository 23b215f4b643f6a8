package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/lease"
	"github.com/raftpace/raftpace/node/wire"
)

// Reserve asks for count events of key: ReserveAll of one key.
func (n *Node) Reserve(ctx context.Context, key string, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	return n.ReserveAll(ctx, []raftpace.Want{{Key: key, Count: count}}, maxWait)
}

// ReserveAll asks for the events of every want at one instant that
// satisfies each key's limit, or consumes none: if the wait would exceed
// maxWait it returns a *LimitExceededError naming the key that set it. It
// works on any node. A single event of one key is served from the node's
// leases (package node/lease) unless DisableLeases is set; any other
// request is one grant of the leader's pacer (forwarded by a follower:
// one round trip for all its keys), retried within maxWait when it
// arrives too late to be used within UseGrace.
//
// A limit in dry run (fsm.Limit.DryRun) is asked for a slot now, after the
// enforced keys were granted; the event goes whatever it answers
// (report.OutcomeDryRun counts those it had none for). The refusal gate
// holds such a key as any other.
func (n *Node) ReserveAll(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error) {
	if err := wire.CheckWants(wants); err != nil {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	begin := time.Now()
	deadline := begin.Add(max(maxWait, 0))
	var enforced, dry []raftpace.Want
	for _, w := range wants {
		if lim, _ := n.state.Limit(w.Key); lim.DryRun {
			dry = append(dry, w)
		} else {
			enforced = append(enforced, w)
		}
	}
	r := raftpace.Reservation{At: begin, UseBy: begin.Add(n.cfg.UseGrace)}
	if len(enforced) > 0 {
		var err error
		r, err = n.admit(ctx, enforced, deadline, deadline)
		n.reserved(enforced, begin, r, err, false)
		if err != nil {
			return raftpace.Reservation{}, err
		}
	}
	for _, w := range dry { // each key its own count: a dry run measures its key alone
		one := []raftpace.Want{w}
		dr, err := n.admit(ctx, one, deadline, begin)
		if !n.reserved(one, begin, dr, err, true) && err != nil {
			return raftpace.Reservation{}, err // paused, closed: not the limit's answer
		}
		if len(enforced) == 0 { // admitted now, whatever the limit said
			r = raftpace.Reservation{At: time.Now(), UseBy: time.Now().Add(n.cfg.UseGrace)}
		}
	}
	return r, nil
}

// admit serves wants through the refusal gate (waiting out pauses until
// gateBy) and then the member's mode: its fallback, or the leader (waiting
// for the limits' slots until limitBy).
func (n *Node) admit(ctx context.Context, wants []raftpace.Want, gateBy, limitBy time.Time) (raftpace.Reservation, error) {
	for {
		if n.closed() {
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		if n.departing.Load() {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w (leaving the cluster)", raftpace.KeysOf(wants), raftpace.ErrClosed)
		}
		for _, w := range wants {
			if err := n.gate.Wait(ctx, w.Key, max(0, time.Until(gateBy))); err != nil {
				return raftpace.Reservation{}, err
			}
		}
		if n.fallback.Current() != ModeRaft {
			r, err := n.fallback.ReserveAll(wants, time.Until(limitBy))
			switch {
			case errors.Is(err, errPoolPending):
				if err := sleepCtx(ctx, n.ctx, 20*time.Millisecond); err != nil {
					return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w", raftpace.KeysOf(wants), err)
				}
				continue
			case !errors.Is(err, wire.ErrNotLeader):
				if err == nil {
					n.stats.fallbackGrants.Add(1)
				}
				return r, err
			}
		}
		r, err := n.reserveRaft(ctx, wants, max(0, time.Until(limitBy)))
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
func (n *Node) reserveRaft(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error) {
	if len(wants) == 1 && wants[0].Count == 1 && !n.cfg.DisableLeases {
		return n.leases.Reserve(ctx, wants[0].Key, maxWait)
	}
	what := raftpace.KeysOf(wants)
	begin := time.Now()
	backoff := wire.RetryBackoffMin
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
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w within max wait %v: %w", what, raftpace.ErrNoLeader, maxWait, lastErr)
		}
		sent := time.Now()
		wait, held, err := n.pacer.ReserveAll(ctx, n.ctx.Done(), wants, remaining)
		if errors.Is(err, wire.ErrNotLeader) {
			sent = time.Now()
			wait, held, err = n.forwardReserve(ctx, wants, remaining)
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
			n.log.Warn("grant arrived too late to use; asking again", "keys", what, "round_trip", arrived.Sub(sent), "use_grace", n.cfg.UseGrace)
			lastErr = fmt.Errorf("grant arrived after %v, past its use-by", arrived.Sub(sent))
			continue
		}
		if !wire.Retryable(err) {
			return raftpace.Reservation{}, err
		}
		if n.inFallback() {
			return raftpace.Reservation{}, lease.ErrModeChanged
		}
		lastErr = err
		n.log.Debug("reserve: retrying", "keys", what, "err", err)
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %s: %w: %w", what, raftpace.ErrNoLeader, err)
		}
		backoff = wire.NextBackoff(backoff)
	}
}

// Forfeit records that a caller dropped a reservation it could not use by
// its UseBy (for the node's counters).
func (n *Node) Forfeit(raftpace.Reservation) { n.stats.forfeited.Add(1) }

// forwardReserve asks the leader for every want at one instant by the one
// path to the leader (leadercall.go).
func (n *Node) forwardReserve(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (wait, held time.Duration, err error) {
	what := "reserve " + raftpace.KeysOf(wants)
	var resp wire.ReserveResp
	err = n.lc.Within(ctx, what, wire.MethodReserve, wire.ReserveReq{Wants: wants, MaxWait: maxWait}.Encode(), maxWait, func(raw []byte) (err error) {
		resp, err = wire.DecodeReserveResp(raw)
		return err
	})
	if err == nil {
		key := wants[0].Key
		if resp.Key != "" {
			key = resp.Key
		}
		err = n.grantErr(what, key, resp.Code, resp.Wait, maxWait, resp.Msg)
	}
	if err != nil {
		return 0, 0, err
	}
	return resp.Wait, resp.Held, nil
}
