package pacer

import (
	"context"
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

func (p *Pacer) newHold(maxWait time.Duration) hold {
	now := p.now()
	return hold{entry: now, share: now + int64(min(max(maxWait, 0), MaxHold)), horizon: now + int64(maxHorizonHold)}
}

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

// maxSettle bounds the rounds of settle; F takes one value per set of
// members not held, so it settles long before.
const maxSettle = 64

// settle returns the key's parameters for a grant at now whose claim on
// the rate ends at end(params): scaled by F over [now, needed(end)]. A
// smaller F stretches the claim, which may reach a later, smaller F; F
// only falls as the claim grows, so the rounds end. !ok: the shares do
// not reach far enough for any F.
func (p *Pacer) settle(ks *keyState, now int64, end func(gcra.Params) int64) (gcra.Params, bool) {
	params, ok := p.scaled(ks, now, now)
	for i := 0; ok && i < maxSettle; i++ {
		later, fits := p.scaled(ks, now, p.needed(end(params), params.Interval))
		if !fits {
			return gcra.Params{}, false
		}
		if later == params {
			return params, true
		}
		params = later
	}
	return gcra.Params{}, false
}

// shareWait returns the channel a request waits on for its share, or nil
// (no shares: F is always 1).
func (p *Pacer) shareWait() <-chan struct{} {
	if p.Shares == nil {
		return nil
	}
	return p.Shares.Changes()
}

// awaitShare takes a request whose first slot (at tatp) lies past the
// shares' reach; p.mu is held and released here. A slot past the caller's
// maximum wait is refused at once (at the full rate it comes soonest);
// otherwise the request waits for ch (read before F, so a round that ended
// since is not missed) until the hold's deadline. nil: ask again.
func (p *Pacer) awaitShare(ks *keyState, key string, now, tatp int64, maxWait time.Duration, h hold, ch <-chan struct{}, ctx context.Context, done <-chan struct{}) error {
	first := tatp - ks.params.Tolerance - now
	p.mu.Unlock()
	if time.Duration(first) > maxWait {
		return &raftpace.LimitExceededError{Key: key, Wait: time.Duration(first), MaxWait: maxWait}
	}
	if ch == nil {
		return ErrNoShare
	}
	return p.wait(h.share, ch, ctx, done, key, "its share", ErrNoShare)
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
	l, _, err := p.LeaseAt(ctx, done, key, holder, count, maxWait)
	return l, err
}

// LeaseAt is Lease, and also says when (on the pacer's clock) the lease
// was granted, for the caller that restates it when its answer leaves
// (wire.Lease.Restated).
func (p *Pacer) LeaseAt(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error) {
	if count < 1 {
		count = 1
	}
	h := p.newHold(maxWait)
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
		shareCh := p.shareWait() // before F is read: see awaitShare
		now := p.now()
		tatp := max(now, ks.tat)
		// Scale for the first slot; a lease of several slots is cut below
		// to those the share reaches.
		params, ok := p.settle(ks, now, func(q gcra.Params) int64 { return tatp + q.Interval })
		if !ok {
			// Not even the first slot is in the share's reach (a slow
			// key's queue runs further ahead than the last renewal's
			// promise): wait for the next renewal instead of having the
			// caller poll.
			if err := p.awaitShare(ks, key, now, tatp, maxWait, h, shareCh, ctx, done); err != nil {
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
