// Package lease is a raftpace node's lease cache: it serves the node's
// single-event reservations from leases, runs of slots granted by the
// leader in one answer. Every node uses it, the leader too (its leases
// come from its own pacer without a network hop), so there is one path for
// all callers.
//
// # What it promises
//
// Slots are served in time order. A slot must be used by its UseBy (the
// slot's time measured from when the lease was requested, plus UseGrace);
// a slot whose UseBy has passed, or is less than UseGrace/4 away, is
// skipped, never saved for later (unless the node's unsafe test option
// SpendExpired says otherwise). The margin is for the caller: a slot
// served a microsecond before its use-by could only be forfeited by a
// caller that must still receive the answer (the agent's data plane), and
// when a queue lags behind real time (callers slower than the slots)
// every slot taken would be one at that edge. A lease whose
// every slot's use-by passed in transit is dropped and asked for again. A
// reservation consumes nothing when its slot is further away than the
// caller's maximum wait. A request that waits before it is sent (its
// node's message of many, package node/batch) counts the wait as the
// leader's hold, not as transit.
//
// Size: a lease starts at one slot; when a lease leaves the queue the next
// request asks for twice as many if every slot was served, and for what was
// served if slots expired. At saturation every node asks for the leader's
// cap and the leader serves requests in arrival order, so nodes with equal
// demand get equal shares; a node's use cannot feed back into a larger
// share. A lease is requested ahead of need, when what is left covers less
// than two round trips (or half a span), unless the slot just served is
// already further away than a prefetch would accept.
//
// Errors and log lines are the node's: they say "node:", as they did when
// this was part of package node.
//
// # What it may depend on
//
// Packages raftpace (Reservation and the errors a reservation ends in) and
// node/wire (the Lease a grant is). It does not import node: its node gives
// it, in Deps, the config values it reads, a clock and its epoch, a logger,
// the counters it bumps, its lifetime, and the node's own ways to fetch a
// lease (from its pacer, or from the leader by the node's one path to it),
// to tell a retryable failure and to tell that it fell back.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/node/wire"
)

// Deps is what a Cache is given by its node.
type Deps struct {
	UseGrace     time.Duration // Config.UseGrace: a slot's use-by past its time
	HorizonAhead time.Duration // Config.HorizonAhead: a prefetch accepts half
	LeaseSpan    time.Duration // Config.LeaseSpan
	SpendExpired bool          // Config.Unsafe.SpendExpired: serve stale slots

	Now   func() int64 // the node's monotonic clock, in nanoseconds
	Epoch time.Time    // the wall time of Now's zero
	Log   *slog.Logger
	Count Counters

	// Ctx is the node's lifetime: when it ends, waits end with
	// raftpace.ErrClosed and fetches are cancelled. WG counts the
	// goroutines the cache starts (fetches); the node waits for them on
	// Close.
	Ctx context.Context
	WG  *sync.WaitGroup
	// Sleep sleeps d, or returns early with an error when ctx or the node
	// ends.
	Sleep func(ctx context.Context, d time.Duration) error
	// A retried fetch sleeps BackoffMin first, then twice as long each
	// time, at most BackoffMax.
	BackoffMin, BackoffMax time.Duration

	// Fetch asks the leader (the node itself, or over RPC) for up to want
	// slots of key, waiting at most maxWait for the first. Its errors: a
	// *raftpace.LimitExceededError; a retryable one (Retryable); else one
	// the reservation ends in. arrived is when its answer reached this
	// node (on Now's clock; 0: when Fetch returned): a caller woken
	// after a thousand others that came in the same message must not
	// count its wait for the scheduler as transit.
	Fetch func(ctx context.Context, key string, want int, maxWait time.Duration) (l wire.Lease, arrived int64, err error)
	// Retryable reports whether a new fetch may cure err.
	Retryable func(err error) bool
	// InFallback reports whether the node should stop retrying the leader
	// and serve its callers from its own fallback (ErrModeChanged).
	InFallback func() bool
}

// Counters are the node's counters the cache bumps.
type Counters struct {
	LateGrants  *atomic.Uint64 // leases dropped: arrived past every use-by
	Leases      *atomic.Uint64 // leases installed
	LeasedSlots *atomic.Uint64 // slots in them
}

// ErrModeChanged: while retrying the leader, the node moved to fallback;
// the node's Reserve dispatches again.
var ErrModeChanged = errors.New("node: admission mode changed")

// Cache serves a node's callers from leases, per key (the package doc says
// how). Build it with New.
type Cache struct {
	d  Deps
	mu sync.RWMutex
	by map[string]*keyLease
	// sweepAt: when by grows to this many keys, idle ones are dropped
	// (sweepLocked), so keys made by templates do not pile up.
	sweepAt int
}

// minSweep is the fewest keys a cache sweeps at; IdleAfter is how long a
// key without a request or a queued slot stays.
const (
	minSweep  = 1024
	IdleAfter = time.Minute
)

// keyLease is one key's leases on this node.
type keyLease struct {
	mu     sync.Mutex
	q      [2]heldLease // queued leases, in time order; q[0] is served first
	queued int
	want   int   // slots to ask for next
	rtt    int64 // smoothed round trip of lease requests, ns
	fetch  *leaseFetch
	last   int64 // node clock: the last request (IdleAfter)
}

type heldLease struct {
	wire.Lease
	// node clock: request sent (plus the time the leader held it), answer
	// arrived
	sent, arrived int64
	next          int // next slot to serve
	expired       int // slots skipped because their use-by passed
}

// leaseFetch is one lease request in flight; waiters block on done.
type leaseFetch struct {
	done chan struct{}
	err  error
}

const maxLeaseWant = 1 << 20

// New returns the lease cache of a node.
func New(d Deps) *Cache {
	return &Cache{d: d, by: make(map[string]*keyLease), sweepAt: minSweep}
}

func (c *Cache) get(key string) *keyLease {
	c.mu.RLock()
	kl := c.by[key]
	c.mu.RUnlock()
	if kl != nil {
		return kl
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kl = c.by[key]; kl == nil {
		if len(c.by) >= c.sweepAt {
			c.sweepLocked(c.d.Now())
			c.sweepAt = max(minSweep, 2*len(c.by))
		}
		kl = &keyLease{want: 1}
		c.by[key] = kl
	}
	return kl
}

// sweepLocked drops the keys idle for IdleAfter: no request, no fetch in
// flight and no slot still to serve. A dropped key starts again at a
// one-slot lease. Amortised: it runs when the cache has doubled since the
// last sweep. Callers hold c.mu for writing.
func (c *Cache) sweepLocked(now int64) {
	for key, kl := range c.by {
		if !kl.mu.TryLock() {
			continue // in use
		}
		if kl.fetch == nil && now-kl.last > int64(IdleAfter) && kl.covered(now) <= 0 {
			delete(c.by, key)
		}
		kl.mu.Unlock()
	}
}

// Keys is how many keys the cache holds.
func (c *Cache) Keys() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.by)
}

type takeResult int

const (
	taken takeResult = iota
	tooFar
	empty
)

// take serves the next usable slot, skipping expired ones and those with
// less than grace/4 of their use-by left. It consumes nothing when the slot
// is further away than maxWait.
func (kl *keyLease) take(now, grace, maxWait int64, spendExpired bool) (at, useBy int64, r takeResult) {
	margin := grace / 4
	for kl.queued > 0 {
		h := &kl.q[0]
		// The first slot i >= next with sent + slot(i) + grace >= now + margin.
		i := h.next
		if m := now + margin - grace - h.sent; m > 0 && h.Slot(i) < m && !spendExpired {
			j := int((m - h.Base + h.Spacing - 1) / h.Spacing)
			if j > h.Count {
				j = h.Count
			}
			h.expired += j - i
			i = j
		}
		if i >= h.Count {
			kl.retire()
			continue
		}
		h.next = i
		at = h.arrived + h.Slot(i)
		if at-now > maxWait {
			return at, 0, tooFar
		}
		h.next++
		if spendExpired {
			return at, now + grace + h.Slot(i), taken // never forfeited: unsafe
		}
		return at, h.sent + h.Slot(i) + grace, taken
	}
	return 0, 0, empty
}

// covered is how far ahead of now the queued slots reach.
func (kl *keyLease) covered(now int64) int64 {
	if kl.queued == 0 {
		return 0
	}
	h := &kl.q[kl.queued-1]
	if h.next >= h.Count && kl.queued == 1 {
		return 0
	}
	return h.arrived + h.Slot(h.Count-1) - now
}

// retire drops the used-up head lease and sizes the next request by how it
// went: every slot served asks for twice as many; slots that expired ask
// for what was served.
func (kl *keyLease) retire() {
	h := &kl.q[0]
	if served := h.Count - h.expired; h.expired == 0 {
		if served >= kl.want {
			kl.want = min(2*kl.want, maxLeaseWant)
		}
	} else {
		kl.want = max(1, served)
	}
	kl.q[0], kl.q[1] = kl.q[1], heldLease{}
	kl.queued--
}

// install queues a granted lease behind the held one. A fetch starts only
// while fewer than two leases are queued, so there is always room.
func (kl *keyLease) install(l wire.Lease, sent, arrived int64) {
	rtt := arrived - sent
	if kl.rtt == 0 {
		kl.rtt = rtt
	} else {
		kl.rtt += (rtt - kl.rtt) / 8
	}
	kl.q[kl.queued] = heldLease{Lease: l, sent: sent, arrived: arrived}
	kl.queued++
}
