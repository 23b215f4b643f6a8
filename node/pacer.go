package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/node/wire"
)

// errNoShare: the leader holds no part of the rate for the slots asked
// (no share renewed yet, or not that far ahead); the caller retries.
var errNoShare = errors.New("node: leader holds no share of the rate yet")

// maxHold bounds how long the pacer holds one request waiting for its
// share to reach its first slot; then it answers "retry". It is below
// every caller's own bound on a call to the leader (leaderCallTimeout:
// 500ms more), so a slot is never granted to a caller that already gave
// up on it.
const maxHold = time.Second

// scaled returns the key's GCRA parameters for slots in [a, b]: the rate
// and burst scaled by the fraction F the leader holds there.
func (p *pacer) scaled(ks *keyState, a, b int64) (gcra.Params, bool) {
	F := 1.0
	if p.shares != nil {
		F = p.shares.fraction(a, b)
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

// maxExtendBatch bounds the keys one horizon entry carries.
const maxExtendBatch = 1024

// pacer is the leader's in-memory GCRA pacer. It grants only slots whose TAT
// stays at or below the key's committed horizon, and keeps horizons
// committed ahead of need through raft in batches (one entry, many keys).
//
// A key's horizon bounds its TAT, not its slot start times: a leader that
// starts at TAT = inherited horizon continues a GCRA sequence at least as
// conservative as the old leader's, so the union of both leaders' grants is
// itself a conforming sequence and the R*W+B ceiling holds across the change.
type pacer struct {
	now   func() int64
	ahead int64
	span  int64 // LeaseSpan: the most time one lease covers
	fresh bool  // Unsafe.FreshStart: see Config
	// shares gives F, the part of each key's rate this leader may grant
	// (see shares.go). nil means F = 1 always.
	shares  shareSource
	tracked func(key string) (int64, bool) // the fsm adapter's local horizons
	limits  func() map[string]fsm.Limit
	// granted is told of every grant (outside mu), for the history.
	granted func(key string, count int)

	mu      sync.Mutex
	leading bool
	gen     uint64 // bumped at every leadership change; stale work is dropped
	keys    map[string]*keyState
	kick    chan struct{}
}

type keyState struct {
	limit    fsm.Limit
	params   gcra.Params
	hasLimit bool
	tat      int64
	horizon  int64 // committed horizon, valid for the current generation only
	need     int64 // highest TAT a waiting request needs
	demand   int64 // time of the last request
	changed  chan struct{}
	// held is, per node, the time of the last slot leased to it (this
	// leadership only): a node already holding slots more than two spans
	// ahead gets no multi-slot lease, so it cannot hoard the rate.
	held map[string]int64
}

func newPacer(now func() int64, ahead, span time.Duration, tracked func(string) (int64, bool), limits func() map[string]fsm.Limit) *pacer {
	return &pacer{
		now:     now,
		ahead:   int64(ahead),
		span:    int64(span),
		tracked: tracked,
		limits:  limits,
		keys:    make(map[string]*keyState),
		kick:    make(chan struct{}, 1),
		granted: func(string, int) {},
	}
}

func (p *pacer) kickExtender() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
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

func (p *pacer) newHold(maxWait time.Duration) hold {
	now := p.now()
	return hold{entry: now, share: now + int64(min(max(maxWait, 0), maxHold)), horizon: now + int64(maxHorizonHold)}
}

// wait blocks until ch is closed, deadline passes (retry: the caller
// asks again), ctx ends or the node closes. why names what it waited for.
func (p *pacer) wait(deadline int64, ch <-chan struct{}, ctx context.Context, done <-chan struct{}, key, why string, retry error) error {
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

// shareSource is what the pacer needs of the shares: F for slots in
// [a, b], and a channel closed when their reach may have moved (a renewal
// round ended).
type shareSource interface {
	fraction(a, b int64) float64
	changes() <-chan struct{}
}

// shareWait returns the channel a request waits on for its share, or nil
// (no shares: F is always 1).
func (p *pacer) shareWait() <-chan struct{} {
	if p.shares == nil {
		return nil
	}
	return p.shares.changes()
}

// awaitShare takes a request whose first slot (at tatp) lies past the
// shares' reach; p.mu is held and released here. A slot past the caller's
// maximum wait is refused at once (at the full rate it comes soonest);
// otherwise the request waits for ch (read before F, so a round that ended
// since is not missed) until the hold's deadline. nil: ask again.
func (p *pacer) awaitShare(ks *keyState, key string, now, tatp int64, maxWait time.Duration, h hold, ch <-chan struct{}, ctx context.Context, done <-chan struct{}) error {
	first := tatp - ks.params.Tolerance - now
	p.mu.Unlock()
	if time.Duration(first) > maxWait {
		return &raftpace.LimitExceededError{Key: key, Wait: time.Duration(first), MaxWait: maxWait}
	}
	if ch == nil {
		return errNoShare
	}
	return p.wait(h.share, ch, ctx, done, key, "its share", errNoShare)
}

// wake releases every waiter so it re-reads the state.
func (ks *keyState) wake() {
	close(ks.changed)
	ks.changed = make(chan struct{})
}

func (p *pacer) keyLocked(key string) *keyState {
	ks := p.keys[key]
	if ks == nil {
		ks = &keyState{changed: make(chan struct{})}
		if h, ok := p.tracked(key); ok {
			ks.tat = h
		}
		ks.horizon = ks.tat
		p.keys[key] = ks
	}
	return ks
}

// setLimit follows a committed limit change (from the fsm adapter).
func (p *pacer) setLimit(key string, lim fsm.Limit, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.keyLocked(key)
	ks.hasLimit = ok
	if ok {
		ks.limit = lim
		ks.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
	}
	ks.wake()
}

// reset reloads every limit after a snapshot restore.
func (p *pacer) reset() {
	lims := p.limits()
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, ks := range p.keys {
		if _, ok := lims[key]; !ok {
			ks.hasLimit = false
			ks.wake()
		}
	}
	for key, lim := range lims {
		ks := p.keyLocked(key)
		ks.hasLimit = true
		ks.limit = lim
		ks.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
		ks.wake()
	}
}

// stepDown stops granting at once and wakes every waiter so it forwards.
func (p *pacer) stepDown() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = false
	p.gen++
	for _, ks := range p.keys {
		ks.wake()
	}
	return p.gen
}

// lead starts granting for generation gen, once raft's barrier has applied
// every earlier entry: each key starts at the horizon this node measured for
// it, so nothing overlaps what an earlier leader may have granted.
func (p *pacer) lead(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return false
	}
	for key, ks := range p.keys {
		if h, ok := p.tracked(key); ok && h > ks.tat {
			ks.tat = h
		}
		if p.fresh {
			ks.tat = p.now()
		}
		// Nothing may be granted until this leader commits its own extension.
		ks.horizon = ks.tat
		ks.need = 0
		ks.held = nil
	}
	p.leading = true
	p.kickExtender()
	return true
}

// sameGen reports whether no leadership change happened since gen.
func (p *pacer) sameGen(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen == gen
}

func (p *pacer) isLeading() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leading
}

// reserve grants count events of key, waiting at most maxWait for them. It
// returns the wait measured from the moment of the grant, and how long the
// request was held before it (see hold). It blocks only while the key's
// horizon is being extended or its share does not reach the slots yet.
func (p *pacer) reserve(ctx context.Context, done <-chan struct{}, key string, count int, maxWait time.Duration) (wait, held time.Duration, err error) {
	h := p.newHold(maxWait)
	for {
		p.mu.Lock()
		if !p.leading {
			p.mu.Unlock()
			return 0, 0, wire.ErrNotLeader
		}
		ks := p.keys[key]
		if ks == nil || !ks.hasLimit {
			p.mu.Unlock()
			return 0, 0, fmt.Errorf("node: reserve %q: %w", key, raftpace.ErrUnknownKey)
		}
		shareCh := p.shareWait() // before F is read: see awaitShare
		now := p.now()
		params, ok := p.scaled(ks, now, now)
		var start, newTAT int64
		if ok {
			start, newTAT, err = gcra.Reserve(ks.tat, params, now, count)
			var later gcra.Params
			if later, ok = p.scaled(ks, now, newTAT); err == nil && ok && later != params {
				start, newTAT, err = gcra.Reserve(ks.tat, later, now, count)
			}
		}
		if !ok {
			if err := p.awaitShare(ks, key, now, max(now, ks.tat), maxWait, h, shareCh, ctx, done); err != nil {
				return 0, 0, err
			}
			continue
		}
		if err != nil {
			p.mu.Unlock()
			return 0, 0, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
		}
		wait := time.Duration(start - now)
		if wait > maxWait || newTAT-now > int64(fsm.MaxHorizonAhead)-2*p.ahead {
			p.mu.Unlock()
			return 0, 0, &raftpace.LimitExceededError{Key: key, Wait: wait, MaxWait: maxWait}
		}
		ks.demand = now
		if newTAT <= ks.horizon {
			ks.tat = newTAT
			if ks.horizon-newTAT < p.ahead/2 {
				p.kickExtender()
			}
			p.mu.Unlock()
			p.granted(key, count)
			return wait, time.Duration(now - h.entry), nil
		}
		if newTAT > ks.need {
			ks.need = newTAT
		}
		ch := ks.changed
		p.mu.Unlock()
		p.kickExtender()
		if err := p.wait(h.horizon, ch, ctx, done, key, "its horizon", errRetry); err != nil {
			return 0, 0, err
		}
	}
}

// lease grants holder up to count single-event slots of key. It is GCRA in
// closed form, so its cost does not depend on count: reserving the slots
// one by one at one instant gives slot i at max(now, TAT' + i*T - tau) with
// TAT' = max(now, TAT), and leaves TAT at TAT' + count*T.
//
// The count is capped: at most one LeaseSpan of slots at the full rate
// (plus what the burst allows at once), and one slot if holder already
// holds slots more than two spans ahead. So at rates below one slot per
// span every lease is one slot and nobody sits on slots others wait for;
// at high rates nodes with demand get blocks in turn. A lease is cut to fit
// under the committed horizon; if not even one slot fits, it waits for the
// extension.
func (p *pacer) lease(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, error) {
	if count < 1 {
		count = 1
	}
	h := p.newHold(maxWait)
	for {
		p.mu.Lock()
		if !p.leading {
			p.mu.Unlock()
			return wire.Lease{}, wire.ErrNotLeader
		}
		ks := p.keys[key]
		if ks == nil || !ks.hasLimit {
			p.mu.Unlock()
			return wire.Lease{}, fmt.Errorf("node: lease %q: %w", key, raftpace.ErrUnknownKey)
		}
		shareCh := p.shareWait() // before F is read: see awaitShare
		now := p.now()
		tatp := max(now, ks.tat)
		params, ok := p.scaled(ks, now, now)
		if ok {
			// Scale for the first slot; a lease of several slots is cut
			// below to those the share reaches.
			params, ok = p.scaled(ks, now, tatp+params.Interval)
		}
		if !ok {
			// Not even the first slot is in the share's reach (a slow
			// key's queue runs further ahead than the last renewal's
			// promise): wait for the next renewal instead of having the
			// caller poll.
			if err := p.awaitShare(ks, key, now, tatp, maxWait, h, shareCh, ctx, done); err != nil {
				return wire.Lease{}, err
			}
			continue
		}
		T, tau := params.Interval, params.Tolerance
		base := tatp - tau - now
		first := max(0, base)
		if time.Duration(first) > maxWait || tatp+T-now > int64(fsm.MaxHorizonAhead)-2*p.ahead {
			p.mu.Unlock()
			return wire.Lease{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(first), MaxWait: maxWait}
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
		// Every slot must be paced at this F: cut the lease where the
		// share's reach (or F) changes rather than refuse it.
		for n > 1 {
			if later, ok := p.scaled(ks, now, tatp+n*T); ok && later == params {
				break
			}
			n /= 2
		}
		ks.demand = now
		if n >= 1 {
			ks.tat = tatp + n*T
			l := wire.Lease{Base: base, Spacing: T, Count: int(n), Held: now - h.entry}
			if ks.held == nil {
				ks.held = make(map[string]int64)
			}
			ks.held[holder] = now + l.Slot(l.Count-1)
			if ks.horizon-ks.tat < p.ahead/2 {
				p.kickExtender()
			}
			p.mu.Unlock()
			p.granted(key, l.Count)
			return l, nil
		}
		if tatp+T > ks.need {
			ks.need = tatp + T
		}
		ch := ks.changed
		p.mu.Unlock()
		p.kickExtender()
		if err := p.wait(h.horizon, ch, ctx, done, key, "its horizon", errRetry); err != nil {
			return wire.Lease{}, err
		}
	}
}

// extension is one batch of horizon extensions prepared under the lock.
type extension struct {
	gen     uint64
	cmd     fsm.ExtendHorizons
	targets map[string]int64 // key -> new local horizon (proposal time + Ahead)
}

// collect chooses the keys whose horizon should move: those a request is
// waiting on, and those with recent demand whose horizon is less than half
// the look-ahead away. The Ahead of each entry is measured from now, which is
// taken before the entry is proposed, so the leader's own horizon is the
// earliest any node computes for the entry.
func (p *pacer) collect() (extension, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return extension{}, false
	}
	now := p.now()
	ext := extension{gen: p.gen, targets: make(map[string]int64)}
	keys := make([]string, 0, len(p.keys))
	for key := range p.keys {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ks := p.keys[key]
		if !ks.hasLimit {
			continue
		}
		base := max(now, ks.tat)
		waiting := ks.need > ks.horizon
		active := now-ks.demand < 2*p.ahead && ks.demand != 0
		if !waiting && !(active && ks.horizon-base < p.ahead/2) {
			continue
		}
		target := max(base, ks.need) + p.ahead
		target = max(target, ks.horizon)
		ahead := target - now
		if ahead > int64(fsm.MaxHorizonAhead) {
			ahead = int64(fsm.MaxHorizonAhead)
			target = now + ahead
		}
		if ahead <= 0 {
			continue
		}
		ext.cmd.Entries = append(ext.cmd.Entries, fsm.HorizonEntry{Key: key, Ahead: time.Duration(ahead)})
		ext.targets[key] = target
		if len(ext.cmd.Entries) == maxExtendBatch {
			break
		}
	}
	return ext, len(ext.cmd.Entries) > 0
}

// cursors returns, for a leader about to hand over (it has stopped
// granting: stepDown), every key's exact cursor as horizon entries: Ahead
// is the key's TAT minus now (at least 1ns), measured from before the
// entries are proposed. Committed, they cover every slot this leader
// granted, so its successor starts each key where this leader stopped
// instead of up to HorizonAhead later (DESIGN.md, "Hand-over").
func (p *pacer) cursors() []fsm.ExtendHorizons {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	keys := make([]string, 0, len(p.keys))
	for key, ks := range p.keys {
		if _, tracked := p.tracked(key); tracked || ks.tat > 0 {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var out []fsm.ExtendHorizons
	for i, key := range keys {
		if i%maxExtendBatch == 0 {
			out = append(out, fsm.ExtendHorizons{})
		}
		ahead := min(max(p.keys[key].tat-now, 1), int64(fsm.MaxHorizonAhead))
		last := &out[len(out)-1]
		last.Entries = append(last.Entries, fsm.HorizonEntry{Key: key, Ahead: time.Duration(ahead)})
	}
	return out
}

// committed installs the horizons of a committed extension, unless
// leadership changed meanwhile.
func (p *pacer) committed(ext extension) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ext.gen != p.gen || !p.leading {
		return
	}
	for key, target := range ext.targets {
		ks := p.keys[key]
		if ks == nil {
			continue
		}
		if target > ks.horizon {
			ks.horizon = target
		}
		ks.wake()
	}
}

// snapshot lists the pacer's view of each key, for status.
func (p *pacer) view() map[string]keyView {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make(map[string]keyView, len(p.keys))
	for key, ks := range p.keys {
		v := keyView{}
		if p.leading {
			v.HorizonIn = time.Duration(ks.horizon - now)
			v.Backlog = time.Duration(max(0, ks.tat-now))
		}
		out[key] = v
	}
	return out
}

type keyView struct {
	HorizonIn time.Duration // committed horizon minus now (leader only)
	Backlog   time.Duration // TAT minus now, the queue ahead of a new request
}
