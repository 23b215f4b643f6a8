package pacer

import (
	"context"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/node/wire"
)

// ReserveAll grants every want (Count events of Key; the keys distinct, as
// wire.CheckWants checks) at one instant, or none: it consumes nothing
// when any key would make the caller wait past maxWait, is unknown, or
// asks more than its burst. It returns the wait measured from the moment
// of the grant, and how long the request was held before it (see hold).
// It blocks only while a key's horizon is being extended or its share
// does not reach the slots yet.
//
// The instant is the latest of the keys' own earliest starts; every key
// is granted as a GCRA request arriving then. An arrival later than the
// real one is still a GCRA arrival: each event stays within tau before
// the virtual slot it took, and the slots of one key never overlap, so
// each key's ceiling holds whatever the other keys of the request did to
// its start (node/DESIGN.md, "Several keys, one event").
func (p *Pacer) ReserveAll(ctx context.Context, done <-chan struct{}, wants []raftpace.Want, maxWait time.Duration) (wait, held time.Duration, err error) {
	h := p.newHold(maxWait)
	g := make([]allGrant, len(wants))
	var sw shareWaiter
	var queued *keyState // the key whose share queue sw was in
	defer func() { p.turnTaken(queued, &sw, err == nil) }()
	for {
		p.mu.Lock()
		if !p.leading {
			p.mu.Unlock()
			return 0, 0, wire.ErrNotLeader
		}
		for i, w := range wants {
			ks := p.keyLocked(w.Key)
			if ks == nil || !ks.hasLimit {
				p.mu.Unlock()
				return 0, 0, fmt.Errorf("node: reserve %q: %w", w.Key, raftpace.ErrUnknownKey)
			}
			g[i] = allGrant{want: w, ks: ks}
		}
		now := p.now()
		at, last, short, err := p.instant(g, now)
		if err != nil {
			p.mu.Unlock()
			return 0, 0, err
		}
		if short >= 0 {
			ks := g[short].ks
			if sw.turn && queued != ks {
				p.passShare(queued, now) // its turn on another key, not taken
				sw.turn = false
			}
			queued = ks
			if err := p.awaitShare(ks, g[short].want.Key, now, max(now, ks.tat), maxWait, h, &sw, ctx, done); err != nil {
				return 0, 0, err
			}
			continue
		}
		wait := time.Duration(at - now)
		if wait > maxWait {
			p.mu.Unlock()
			return 0, 0, &raftpace.LimitExceededError{Key: g[last].want.Key, Wait: wait, MaxWait: maxWait}
		}
		var ch <-chan struct{} // a key's horizon or quota falls short: wait for it
		var until int64        // a key's slot lies in its quota's next window
		for i := range g {
			ks := g[i].ks
			if g[i].tat-now > int64(fsm.MaxHorizonAhead)-2*p.ahead {
				p.mu.Unlock()
				return 0, 0, &raftpace.LimitExceededError{Key: g[i].want.Key, Wait: wait, MaxWait: maxWait}
			}
			ks.demand = now
			end, short, err := p.quotaCheck(g[i].want.Key, ks, now, at, int64(g[i].want.Count))
			if err != nil {
				p.mu.Unlock()
				return 0, 0, err
			}
			if end > 0 && at >= end {
				until = max(until, end)
			}
			if g[i].tat > ks.horizon {
				ks.need = max(ks.need, g[i].tat)
			}
			if (g[i].tat > ks.horizon || short) && ch == nil {
				ch = ks.changed
			}
		}
		if until > 0 {
			if err := p.awaitWindow(until, g[last].want.Key, h, ctx, done); err != nil {
				return 0, 0, err
			}
			continue
		}
		if ch == nil {
			for i := range g {
				ks := g[i].ks
				ks.tat = g[i].tat
				p.spend(g[i].want.Key, ks, int64(g[i].want.Count))
				if ks.horizon-ks.tat < p.lookAhead(ks)/2 {
					p.kickKey(g[i].want.Key)
				}
				p.passShare(ks, now)
			}
			sw.turn = false
			p.mu.Unlock()
			for _, w := range wants {
				p.Granted(w.Key, w.Count)
			}
			return wait, time.Duration(now - h.entry), nil
		}
		for i := range g {
			p.kickKey(g[i].want.Key)
		}
		p.mu.Unlock()
		if err := p.wait(h.horizon, ch, ctx, done, g[0].want.Key, "its horizon", wire.ErrRetry); err != nil {
			return 0, 0, err
		}
	}
}

// allGrant is one key of a ReserveAll: its state and the TAT a grant at
// the common instant leaves it.
type allGrant struct {
	want raftpace.Want
	ks   *keyState
	tat  int64
}

// instant finds the common instant of a ReserveAll at now (p.mu held):
// the latest of the keys' earliest starts, each key paced at the F the
// leader holds now. Every key's claim from that instant must be paced at
// that F to its end (all but its overrun, see needed): a claim that runs
// past the shares' reach is not paced at the smaller F held that far
// ahead, it waits for the next renewal round (short), as a lease's first
// slot does. Pacing it slower would be safe but self-feeding: with
// callers queued deeper than the reach, every grant would stretch the
// queue further, down to the leader's own fraction (a fleet of three
// fell from 8/s to 2.5/s after a leader's kill until this rule). Nor is
// it paced at a small F now when F rises at a known time soon enough to
// end its claim sooner (riseFirst): it waits for the rise. It
// fills each grant's TAT and returns the key that set the instant (last),
// or the key that must wait for its share (short >= 0), or an error for a
// count the key's burst refuses.
func (p *Pacer) instant(g []allGrant, now int64) (at int64, last, short int, err error) {
	params := make([]gcra.Params, len(g))
	at = now
	for i := range g {
		ks, n := g[i].ks, g[i].want.Count
		var ok bool
		if params[i], ok = p.scaled(ks, now, now); !ok {
			return 0, 0, i, nil
		}
		start, _, err := gcra.Reserve(ks.tat, params[i], now, n)
		if err != nil {
			return 0, 0, -1, fmt.Errorf("node: reserve %q: %w: %w", g[i].want.Key, raftpace.ErrInvalidRequest, err)
		}
		if start > at {
			at, last = start, i
		}
	}
	for i := range g {
		ks := g[i].ks
		_, g[i].tat, _ = gcra.Reserve(ks.tat, params[i], at, g[i].want.Count) // checked above
		if !p.holds(ks, now, params[i], g[i].tat) {
			return 0, 0, i, nil
		}
	}
	return at, last, -1, nil
}
