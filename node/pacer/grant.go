package pacer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/node/wire"
)

// ErrNoShare is wire.ErrNoShare: the leader holds no part of the rate for
// the slots asked yet; the caller retries.
var ErrNoShare = wire.ErrNoShare

// MaxHold bounds how long the pacer holds one request waiting for its
// share to reach its first slot; then it answers "retry". It is below
// every caller's own bound on a call to the leader (leaderCallTimeout:
// 500ms more), so a slot is never granted to a caller that already gave
// up on it.
const MaxHold = time.Second

// scaled returns the key's GCRA parameters for slots in [a, b]: the rate
// and burst scaled by the fraction F the leader holds there.
func (p *Pacer) scaled(ks *keyState, a, b int64) (gcra.Params, bool) {
	F := 1.0
	if p.Shares != nil {
		F = p.Shares.Fraction(a, b)
	}
	return scaledBy(ks, F)
}

// scaledBy returns the key's GCRA parameters at fraction F.
func scaledBy(ks *keyState, F float64) (gcra.Params, bool) {
	if F <= 0 {
		return gcra.Params{}, false
	}
	if F >= 1 {
		return ks.params, true
	}
	interval := math.Ceil(float64(ks.params.Interval) / F)
	if interval > float64(fsm.MaxHorizonAhead) {
		// A sliver of the rate: no slot of it fits any horizon (and the
		// interval would overflow int64 as F nears 0).
		return gcra.Params{}, false
	}
	burst := max(1, int(math.Floor(F*float64(ks.limit.Burst))))
	return gcra.NewParams(int64(interval), burst), true
}

// hold is one request's stay in the pacer: it may wait for its key's
// horizon (a commit: milliseconds, at most maxHorizonHold) or for its
// share to reach its first slot (at most maxHold, and not past the caller's
// maximum wait), and reports how long it was held: the grant is at least
// that long after the caller sent the request, which the caller counts in
// the slots' use-by (a grant held on the leader is not a late grant). As
// with the network's delay, the time held does not count against the
// caller's maximum wait: a zero-wait reservation that waited 3 ms for a
// horizon commit still gets the slot free at the grant.
type hold struct {
	entry, share, horizon int64 // entry time and the two deadlines
}

// maxHorizonHold bounds a wait for a horizon commit; like maxHold it is
// below the caller's bound on a leader call (leaderCallTimeout: 500ms at
// least).
const maxHorizonHold = 400 * time.Millisecond

func (p *Pacer) newHold(maxWait time.Duration) hold { return p.holdUpTo(maxWait, MaxHold) }

// holdUpTo is a hold whose wait for its share ends at maxWait or most,
// whichever comes first.
func (p *Pacer) holdUpTo(maxWait, most time.Duration) hold {
	now := p.now()
	return hold{entry: now, share: now + int64(min(max(maxWait, 0), most)), horizon: now + int64(maxHorizonHold)}
}

// MaxQueueHold bounds how long LeaseAt keeps a request in its key's queue
// for its share. Its callers (this node's lease cache, a member's request
// in a message of many) wait for it up to their own maximum wait and more,
// not a leader call's bound, so it may be longer than MaxHold; with
// MaxHold, the third of three nodes' requests for a key at 1/s (three
// seconds deep) gave up every time, lost its place and asked again, and
// the asking again was a good part of the cluster's CPU.
const MaxQueueHold = 5 * time.Second

// wait blocks until ch is closed, deadline passes (retry: the caller
// asks again), ctx ends or the node closes. why names what it waited for.
func (p *Pacer) wait(deadline int64, ch <-chan struct{}, ctx context.Context, done <-chan struct{}, key, why string, retry error) error {
	left := deadline - p.now()
	if left <= 0 {
		return retry
	}
	t := time.NewTimer(time.Duration(left))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return retry
	case <-ctx.Done():
		return fmt.Errorf("node: %q: waiting for %s: %w", key, why, ctx.Err())
	case <-done:
		return raftpace.ErrClosed
	}
}

// ShareSource is what the pacer needs of the shares: F for slots in
// [a, b], and a channel closed when their reach may have moved (a renewal
// round ended).
type ShareSource interface {
	Fraction(a, b int64) float64
	Changes() <-chan struct{}
	// Overrun is how far past the shares' reach a grant paced at
	// interval may claim the rate (wire.ShareOverrun).
	Overrun(interval int64) int64
	// Rise predicts the earliest slot time after now from which a
	// fraction not held at now is counted, and F from then; false if
	// none is known.
	Rise(now int64) (at int64, F float64, ok bool)
}

// needed returns how far the shares must reach for a grant whose claim on
// the rate ends at end, paced at interval: all of it but the overrun
// members leave alone when their share lapses (wire.ShareOverrun). Without
// it no key slower than a share's reach (about ShareTTL) could be granted.
func (p *Pacer) needed(end, interval int64) int64 {
	if p.Shares == nil {
		return end
	}
	return end - p.Shares.Overrun(interval)
}

// pacing returns the key's parameters for a grant at now of the slot at
// tatp, whose claim on the rate ends one interval later: scaled by F at
// now, if the shares hold that F over the whole of [now, needed(end)]. !ok: they do not, or F is
// 0. A claim that runs past the reach of the shares held now would be
// paced at the smaller F held there, down to the fractions of members
// that left (a released fraction counts for every slot to come); it waits
// for the next renewal round instead, as ReserveAll's instant does.
// Pacing it slower would be safe but self-feeding: each grant pushes the
// key's TAT further past the reach, where F stays small. With a member's
// third released, 50 keys at 1/s queued three deep were paced at a third
// for 6-10 s after every replacement of a member (real agents: 50 events
// every three seconds, 26.8/s over 36 s with three replacements).
//
// A grant at a smaller F than a known rise of it (riseFirst) waits too.
func (p *Pacer) pacing(ks *keyState, now, tatp int64) (gcra.Params, bool) {
	params, ok := p.scaled(ks, now, now)
	if !ok {
		return gcra.Params{}, false
	}
	if !p.holds(ks, now, params, tatp+params.Interval) {
		return gcra.Params{}, false
	}
	return params, true
}

// holds reports whether a grant at now paced at params (F at now) whose
// claim ends at end may be made now: the shares hold that F over all of
// the claim but its overrun, and no known rise of F ends the claim sooner
// (riseFirst). Leases (pacing) and ReserveAll (instant) alike.
func (p *Pacer) holds(ks *keyState, now int64, params gcra.Params, end int64) bool {
	later, ok := p.scaled(ks, now, p.needed(end, params.Interval))
	return ok && later == params && !p.riseFirst(ks, now, params, end)
}

// riseFirst reports whether a grant paced at params (F below 1 now) whose
// claim would end at end had better wait for F to rise: the shares know
// when members not held now will be (they were in fallback and its grants
// reach until then), and a claim made from then at the larger F would
// end sooner. A slow key's claim at a small F reaches far: after a leader
// died, its members' fallback grants of slow keys (their own overrun
// ahead) left the new leader F = 1/6 for two seconds, a key at 1/s was
// paced at one slot per 6 s, its three callers queued 18 s deep, and 50
// such keys admitted 20.8/s of 50 through three leader kills. A fast
// key's claim ends long before the rise and is granted at once.
func (p *Pacer) riseFirst(ks *keyState, now int64, params gcra.Params, end int64) bool {
	if p.Shares == nil || params == ks.params {
		return false
	}
	at, F, ok := p.Shares.Rise(now)
	if !ok || at >= end {
		return false
	}
	later, ok := scaledBy(ks, F)
	return ok && max(end-params.Interval, at)+later.Interval < end
}

// awaitShare takes a request whose first slot (at tatp) lies past the
// shares' reach, or that others wait before; p.mu is held and released
// here. A slot past the caller's maximum wait is refused at once (at the
// full rate it comes soonest); otherwise the request joins its key's
// queue (w) and waits for its turn (passShare), or the hold's deadline.
// nil: its turn came, ask again.
//
// Requests wait in their key's queue, not on the shares' change: at every
// renewal round the latter woke every request waiting on any key (30,000
// at 10,000 slow keys from three nodes), nearly all to find their key's
// next slot still out of reach (or taken by another woken with them), and
// those wake-ups were a fifth of the cluster's CPU; and the request that
// won each slot was whichever the scheduler ran first. Now one request
// wakes per slot that comes into reach, the first that asked.
func (p *Pacer) awaitShare(ks *keyState, key string, now, tatp int64, maxWait time.Duration, h hold, w *shareWaiter, ctx context.Context, done <-chan struct{}) error {
	first := tatp - ks.params.Tolerance - now
	if time.Duration(first) > maxWait {
		p.mu.Unlock()
		return &raftpace.LimitExceededError{Key: key, Wait: time.Duration(first), MaxWait: maxWait}
	}
	if p.Shares == nil || h.share <= now {
		p.mu.Unlock()
		return ErrNoShare
	}
	w.ch = make(chan struct{})
	if w.turn {
		// Its turn came but the slot went (a limit change, a multi-key
		// reservation): it keeps its place.
		ks.shareQ = append([]*shareWaiter{w}, ks.shareQ...)
	} else {
		ks.shareQ = append(ks.shareQ, w)
	}
	w.turn = false
	p.shareWaiters[key] = ks
	p.mu.Unlock()
	if err := p.wait(h.share, w.ch, ctx, done, key, "its share", ErrNoShare); err != nil {
		p.mu.Lock()
		if !ks.leaveQueue(w) {
			// Its turn came as it gave up: the next in line takes it.
			p.passShare(ks, p.now())
		}
		p.mu.Unlock()
		return err
	}
	w.turn = true
	return nil
}

// shareWaiter is one request in its key's queue for its share.
type shareWaiter struct {
	ch   chan struct{} // closed when its turn comes
	turn bool          // its turn came (and it has not been granted yet)
}

// leaveQueue takes w out of ks's queue; false if it was not there (its
// turn came). p.mu is held.
func (ks *keyState) leaveQueue(w *shareWaiter) bool {
	for i, q := range ks.shareQ {
		if q == w {
			ks.shareQ = append(ks.shareQ[:i], ks.shareQ[i+1:]...)
			return true
		}
	}
	return false
}

// passShare gives the first request in ks's queue its turn when the key's
// next slot is in the shares' reach; p.mu is held. Every grant of the key
// calls it, so a round that brings several slots into reach serves as many
// waiters, one after the other.
func (p *Pacer) passShare(ks *keyState, now int64) {
	if len(ks.shareQ) == 0 {
		return
	}
	tatp := max(now, ks.tat)
	if _, ok := p.pacing(ks, now, tatp); ok {
		close(ks.shareQ[0].ch)
		ks.shareQ[0] = nil
		ks.shareQ = ks.shareQ[1:]
	}
}

// turnTaken ends w's turn: granted, or gone (an error, a limit). A turn
// not granted passes to the next in line. p.mu is not held.
func (p *Pacer) turnTaken(ks *keyState, w *shareWaiter, granted bool) {
	if ks == nil || !w.turn {
		return
	}
	w.turn = false
	if !granted {
		p.mu.Lock()
		p.passShare(ks, p.now())
		p.mu.Unlock()
	}
}

// FollowShares calls SharesMoved after every change of the shares until
// ctx ends; the caller runs it in a goroutine of its own. The channel is
// read before the call: a change during it is seen at the next turn.
func (p *Pacer) FollowShares(ctx context.Context) {
	if p.Shares == nil {
		return
	}
	for ctx.Err() == nil {
		ch := p.Shares.Changes()
		p.SharesMoved()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// SharesMoved gives the requests waiting for their share (awaitShare)
// their turn where their key's next slot is now in reach (FollowShares
// calls it).
func (p *Pacer) SharesMoved() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for key, ks := range p.shareWaiters {
		if p.keys[key] != ks || !p.leading {
			ks.wakeShare()
		} else {
			p.passShare(ks, now)
		}
		if len(ks.shareQ) == 0 {
			delete(p.shareWaiters, key)
		}
	}
}

// Reserve grants count events of key, waiting at most maxWait for them:
// ReserveAll of one key.
func (p *Pacer) Reserve(ctx context.Context, done <-chan struct{}, key string, count int, maxWait time.Duration) (wait, held time.Duration, err error) {
	return p.ReserveAll(ctx, done, []raftpace.Want{{Key: key, Count: count}}, maxWait)
}

// Lease grants holder up to count single-event slots of key. It is GCRA in
// closed form, so its cost does not depend on count: reserving the slots
// one by one at one instant gives slot i at max(now, TAT' + i*T - tau) with
// TAT' = max(now, TAT), and leaves TAT at TAT' + count*T.
//
// The count is capped: at most one LeaseSpan of slots at the full rate
// (plus what the burst allows at once), and one slot if holder already
// holds slots more than two spans ahead. So at rates below one slot per
// span every Lease is one slot and nobody sits on slots others wait for;
// at high rates nodes with demand get blocks in turn. A Lease is cut to fit
// under the committed horizon; if not even one slot fits, it waits for the
// extension.
func (p *Pacer) Lease(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, error) {
	l, _, err := p.lease(ctx, done, key, holder, count, maxWait, p.newHold(maxWait))
	return l, err
}

// LeaseAt is Lease, and also says when (on the pacer's clock) the lease
// was granted, for the caller that restates it when its answer leaves
// (wire.Lease.Restated).
//
// It may keep the request in its key's queue up to MaxQueueHold (not
// MaxHold): it is not for a caller bounded by a leader call's timeout.
func (p *Pacer) LeaseAt(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error) {
	return p.lease(ctx, done, key, holder, count, maxWait, p.holdUpTo(maxWait, MaxQueueHold))
}

// TryLease is LeaseAt that never waits: where LeaseAt would hold the
// request (for a horizon commit or for its share), it answers
// wire.ErrWouldWait at once, and the caller decides where to wait.
func (p *Pacer) TryLease(key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error) {
	now := p.now()
	l, at, err := p.lease(context.Background(), nil, key, holder, count, maxWait, hold{entry: now, share: now, horizon: now})
	if errors.Is(err, ErrNoShare) || errors.Is(err, wire.ErrRetry) {
		return wire.Lease{}, 0, wire.ErrWouldWait
	}
	return l, at, err
}

func (p *Pacer) lease(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration, h hold) (l wire.Lease, at int64, err error) {
	if count < 1 {
		count = 1
	}
	var w shareWaiter
	var queued *keyState // the key whose queue w was in
	defer func() { p.turnTaken(queued, &w, err == nil) }()
	for {
		p.mu.Lock()
		if !p.leading {
			p.mu.Unlock()
			return wire.Lease{}, 0, wire.ErrNotLeader
		}
		ks := p.keyLocked(key)
		if ks == nil || !ks.hasLimit {
			p.mu.Unlock()
			return wire.Lease{}, 0, fmt.Errorf("node: lease %q: %w", key, raftpace.ErrUnknownKey)
		}
		now := p.now()
		tatp := max(now, ks.tat)
		// Scale for the first slot; a lease of several slots is cut below
		// to those the share reaches.
		params, ok := p.pacing(ks, now, tatp)
		if ok && len(ks.shareQ) > 0 && !w.turn {
			// Others wait for the key's share before it: behind them
			// (the first may take this slot now).
			p.passShare(ks, now)
			ok = false
		}
		if !ok {
			// Not even the first slot is in the share's reach (a slow
			// key's queue runs further ahead than the last renewal's
			// promise): wait for the next renewal instead of having the
			// caller poll.
			queued = ks
			if err := p.awaitShare(ks, key, now, tatp, maxWait, h, &w, ctx, done); err != nil {
				return wire.Lease{}, 0, err
			}
			continue
		}
		T, tau := params.Interval, params.Tolerance
		base := tatp - tau - now
		first := max(0, base)
		if time.Duration(first) > maxWait || tatp+T-now > int64(fsm.MaxHorizonAhead)-2*p.ahead {
			p.mu.Unlock()
			return wire.Lease{}, 0, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(first), MaxWait: maxWait}
		}
		// Slots at once (burst left) plus one span at the full rate.
		limit := int64(1)
		if base < 0 {
			limit += (-base) / T
		}
		limit += p.span / T
		if ks.held[holder]-now > 2*p.span {
			limit = 1
		}
		n := min(int64(count), limit)
		if fit := (ks.horizon - tatp) / T; fit < n {
			n = fit
		}
		end, _, err := p.quotaCheck(key, ks, now, now+first, 1)
		if err != nil {
			p.mu.Unlock()
			return wire.Lease{}, 0, err
		}
		if end > 0 && now+first >= end {
			if err := p.awaitWindow(end, key, h, ctx, done); err != nil {
				return wire.Lease{}, 0, err
			}
			continue
		}
		if q := ks.q; end > 0 {
			// Under the committed count, and every slot in the window.
			n = min(n, q.committed-q.used)
			if n > 0 {
				n = min(n, 1+(end-now-1-base)/T)
			}
		}
		// Every slot must be paced at this F: cut the lease where the
		// share's reach (or F) changes rather than refuse it.
		for n > 1 {
			if later, ok := p.scaled(ks, now, p.needed(tatp+n*T, T)); ok && later == params {
				break
			}
			n /= 2
		}
		ks.demand = now
		if n >= 1 {
			ks.tat = tatp + n*T
			p.spend(key, ks, n)
			l := wire.Lease{Base: base, Spacing: T, Count: int(n), Held: now - h.entry}
			if ks.held == nil {
				ks.held = make(map[string]int64)
			}
			ks.held[holder] = now + l.Slot(l.Count-1)
			if ks.horizon-ks.tat < p.lookAhead(ks)/2 {
				p.kickKey(key)
			}
			w.turn = false
			p.passShare(ks, now)
			p.mu.Unlock()
			p.Granted(key, l.Count)
			return l, now, nil
		}
		if tatp+T > ks.need {
			ks.need = tatp + T
		}
		ch := ks.changed
		p.kickKey(key)
		p.mu.Unlock()
		if err := p.wait(h.horizon, ch, ctx, done, key, "its horizon", wire.ErrRetry); err != nil {
			return wire.Lease{}, 0, err
		}
	}
}
