// Package pacer is the leader's in-memory GCRA pacer: it grants events
// and leases (runs of slots) of each key at the key's rate scaled by F,
// the part of the rate the leader holds (a ShareSource), and only slots
// whose TAT stays under the key's committed horizon. It chooses the
// horizons to extend (Collect) and the exact cursors to hand over
// (Cursors); committing them through raft is the caller's.
//
// It owns no goroutine, network or raft: time comes from a now function
// and every method can be driven by a fake clock (the tests do). Files:
// pacer.go (state, leadership, limits), grant.go (Reserve, Lease and the
// holds for a horizon or a share), horizon.go (extensions, cursors, views).
package pacer

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
)

// Pacer is the leader's in-memory GCRA pacer. It grants only slots whose TAT
// stays at or below the key's committed horizon, and keeps horizons
// committed ahead of need through raft in batches (one entry, many keys).
//
// A key's horizon bounds its TAT, not its slot start times: a leader that
// starts at TAT = inherited horizon continues a GCRA sequence at least as
// conservative as the old leader's, so the union of both leaders' grants is
// itself a conforming sequence and the R*W+B ceiling holds across the change.
type Pacer struct {
	now   func() int64
	ahead int64
	span  int64 // LeaseSpan: the most time one lease covers
	Fresh bool  // Unsafe.FreshStart: see Config
	// Shares gives F, the part of each key's rate this leader may grant
	// (package shares). nil means F = 1 always.
	Shares  ShareSource
	tracked func(key string) (int64, bool)     // the fsm adapter's local horizons
	limitOf func(key string) (fsm.Limit, bool) // the state's, templates resolved
	// IdleAfter: a key without a request for this long, its TAT and
	// horizon passed, leaves memory, and its horizon leaves the state
	// (Collect), so that keys made by templates stay bounded.
	IdleAfter time.Duration
	// Granted is told of every grant (outside mu), for the history.
	Granted func(key string, count int)
	// Wall is the wall clock quota windows are read on (quota.go).
	Wall func() time.Time
	// Quotas gives a key's committed quota count as this node applied it,
	// StoredQuotas every one (to remove those of ended windows); nil: none.
	Quotas       func(key string) (fsm.QuotaCount, bool)
	StoredQuotas func() map[string]fsm.QuotaCount
	swept        int64 // when Collect last looked for ended quota windows

	mu      sync.Mutex
	leading bool
	gen     uint64 // bumped at every leadership change; stale work is dropped
	keys    map[string]*keyState
	kicks   chan struct{}
	// due are the keys a grant or a waiting request marked for the next
	// Collect (kickKey); scanned is when Collect last looked at every key.
	due     map[string]struct{}
	scanned int64
	// shareWaiters are the keys with a request waiting for its share
	// (awaitShare), for SharesMoved.
	shareWaiters map[string]*keyState
}

type keyState struct {
	limit    fsm.Limit
	params   gcra.Params
	hasLimit bool
	tat      int64
	horizon  int64 // committed horizon, valid for the current generation only
	need     int64 // highest TAT a waiting request needs
	demand   int64 // time of the last request that could be granted
	seen     int64 // time of the last request, granted or not (IdleAfter)
	changed  chan struct{}
	// shareQ are the requests waiting for their share, first come first
	// (awaitShare).
	shareQ []*shareWaiter
	// held is, per node, the time of the last slot leased to it (this
	// leadership only): a node already holding slots more than two spans
	// ahead gets no multi-slot lease, so it cannot hoard the rate.
	held map[string]int64
	q    *quota // the count of its quota's current window; nil: none loaded
}

// DefaultIdleAfter is Pacer.IdleAfter unless changed.
const DefaultIdleAfter = time.Minute

// New returns a pacer on the clock now with look-ahead ahead and lease span
// span. tracked gives a key's horizon as this node applied it, limitOf a
// key's limit (its own or its template's).
func New(now func() int64, ahead, span time.Duration, tracked func(string) (int64, bool), limitOf func(string) (fsm.Limit, bool)) *Pacer {
	return &Pacer{
		now:          now,
		ahead:        int64(ahead),
		span:         int64(span),
		tracked:      tracked,
		limitOf:      limitOf,
		IdleAfter:    DefaultIdleAfter,
		keys:         make(map[string]*keyState),
		kicks:        make(chan struct{}, 1),
		due:          make(map[string]struct{}),
		shareWaiters: make(map[string]*keyState),
		scanned:      math.MinInt64 / 2,
		Granted:      func(string, int) {},
		Wall:         time.Now,
	}
}

// Kicks is where the extender waits: a request is waiting on a horizon.
func (p *Pacer) Kicks() <-chan struct{} { return p.kicks }

func (p *Pacer) Kick() {
	select {
	case p.kicks <- struct{}{}:
	default:
	}
}

// kickKey marks key for the next Collect and kicks the extender; p.mu is
// held.
func (p *Pacer) kickKey(key string) {
	p.due[key] = struct{}{}
	p.Kick()
}

// wake releases every waiter so it re-reads the state.
func (ks *keyState) wake() {
	close(ks.changed)
	ks.changed = make(chan struct{})
}

// wakeShare releases the requests waiting for the key's share (not at
// every wake: a horizon's commit wakes every key it extended, four times
// a second).
func (ks *keyState) wakeShare() {
	for _, w := range ks.shareQ {
		close(w.ch)
	}
	ks.shareQ = nil
}

// keyLocked returns key's state, made on first use when key has a limit
// (its own or a template's); nil when it has none, so that requests for
// unknown keys leave nothing behind. A new key starts at the horizon this
// node applied for it: an idle key forgotten here may still have one.
func (p *Pacer) keyLocked(key string) *keyState {
	ks := p.keys[key]
	if ks == nil {
		lim, ok := p.limitOf(key)
		if !ok {
			return nil
		}
		ks = &keyState{changed: make(chan struct{})}
		ks.setLimit(lim, true)
		if h, ok := p.tracked(key); ok {
			ks.tat = h
		}
		if p.Fresh && p.leading {
			ks.tat = p.now() // as Lead does: the unsafe twin of the horizon
		}
		ks.horizon = ks.tat
		p.keys[key] = ks
	}
	ks.seen = p.now()
	return ks
}

func (ks *keyState) setLimit(lim fsm.Limit, ok bool) {
	ks.hasLimit = ok
	if ok {
		ks.limit = lim
		ks.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
	}
}

// LimitChanged follows a committed limit change of key (from the fsm
// adapter): the keys it covers read their limit again. For a template
// that is every key in memory under its prefix; for a key, the key alone
// (deleting its own limit may leave it a template's).
func (p *Pacer) LimitChanged(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !fsm.IsTemplate(key) {
		if ks := p.keys[key]; ks != nil {
			ks.setLimit(p.limitOf(key))
			ks.wake()
			ks.wakeShare()
		}
		return
	}
	prefix := strings.TrimSuffix(key, fsm.Wildcard)
	for k, ks := range p.keys {
		if strings.HasPrefix(k, prefix) {
			ks.setLimit(p.limitOf(k))
			ks.wake()
			ks.wakeShare()
		}
	}
}

// Reset reads every key's limit again after a snapshot restore.
func (p *Pacer) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, ks := range p.keys {
		ks.setLimit(p.limitOf(k))
		ks.wake()
		ks.wakeShare()
	}
}

// StepDown stops granting at once and wakes every waiter so it forwards.
func (p *Pacer) StepDown() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leading = false
	p.gen++
	for _, ks := range p.keys {
		ks.wake()
		ks.wakeShare()
	}
	clear(p.shareWaiters)
	return p.gen
}

// Lead starts granting for generation gen, once raft's barrier has applied
// every earlier entry: each key starts at the horizon this node measured for
// it, so nothing overlaps what an earlier leader may have granted.
func (p *Pacer) Lead(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return false
	}
	for key, ks := range p.keys {
		if h, ok := p.tracked(key); ok && h > ks.tat {
			ks.tat = h
		}
		if p.Fresh {
			ks.tat = p.now()
		}
		// Nothing may be granted until this leader commits its own extension.
		ks.horizon = ks.tat
		ks.need = 0
		ks.held = nil
		ks.q = nil // read again from the committed count
	}
	p.leading = true
	p.scanned = math.MinInt64 / 2 // every key needs this leader's extension
	p.Kick()
	return true
}

// SameGen reports whether no leadership change happened since gen.
func (p *Pacer) SameGen(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen == gen
}

// KeysInMemory is how many keys the pacer keeps (idle ones leave: see
// IdleAfter).
func (p *Pacer) KeysInMemory() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.keys)
}

func (p *Pacer) IsLeading() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leading
}
