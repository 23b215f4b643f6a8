package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// leaseCache serves a node's callers from leases: runs of slots granted by
// the leader in one answer. Every node uses it, the leader too (its leases
// come from its own pacer without a network hop), so there is one path for
// all callers.
//
// Slots are served in time order. A slot must be used by its UseBy (the
// slot's time measured from when the lease was requested, plus UseGrace); a
// slot whose UseBy has passed is skipped, never saved for later.
//
// Size: a lease starts at one slot; when a lease leaves the queue the next
// request asks for twice as many if every slot was served, and for what was
// served if slots expired. At
// saturation every node asks for the leader's cap and the leader serves
// requests in arrival order, so nodes with equal demand get equal shares; a
// node's use cannot feed back into a larger share. A lease is requested
// ahead of need, when what is left covers less than two round trips (or
// half a span).
type leaseCache struct {
	n  *Node
	mu sync.RWMutex
	by map[string]*keyLease
}

// keyLease is one key's leases on this node.
type keyLease struct {
	mu     sync.Mutex
	q      [2]heldLease // queued leases, in time order; q[0] is served first
	queued int
	want   int   // slots to ask for next
	rtt    int64 // smoothed round trip of lease requests, ns
	fetch  *leaseFetch
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

func newLeaseCache(n *Node) *leaseCache {
	return &leaseCache{n: n, by: make(map[string]*keyLease)}
}

func (c *leaseCache) get(key string) *keyLease {
	c.mu.RLock()
	kl := c.by[key]
	c.mu.RUnlock()
	if kl != nil {
		return kl
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kl = c.by[key]; kl == nil {
		kl = &keyLease{want: 1}
		c.by[key] = kl
	}
	return kl
}

type takeResult int

const (
	taken takeResult = iota
	tooFar
	empty
)

// take serves the next usable slot, skipping expired ones. It consumes
// nothing when the slot is further away than maxWait.
func (kl *keyLease) take(now, grace, maxWait int64, spendExpired bool) (at, useBy int64, r takeResult) {
	for kl.queued > 0 {
		h := &kl.q[0]
		// The first slot i >= next with sent + slot(i) + grace >= now.
		i := h.next
		if m := now - grace - h.sent; m > 0 && h.Slot(i) < m && !spendExpired {
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

// reserve serves one event of key from the node's leases, fetching a lease
// when none is left (or soon, ahead of need).
func (c *leaseCache) reserve(ctx context.Context, key string, maxWait time.Duration) (raftpace.Reservation, error) {
	n := c.n
	kl := c.get(key)
	grace := int64(n.cfg.UseGrace)
	begin := n.now()
	backoff := time.Millisecond
	var lastErr error
	asked := false // whether a fetch this call waited for has answered
	for {
		now := n.now()
		remaining := int64(maxWait) - (now - begin)
		if remaining < 0 && !asked {
			// A zero (or tiny) max wait still deserves one answer from
			// the leader: a slot free now, or why not (an unknown key
			// must say so, not "limit exceeded").
			remaining = 0
		}
		if remaining < 0 {
			if lastErr != nil {
				return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w within max wait %v: %w", key, raftpace.ErrNoLeader, maxWait, lastErr)
			}
			return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(-remaining), MaxWait: maxWait}
		}
		kl.mu.Lock()
		at, useBy, r := kl.take(now, grace, remaining, n.cfg.Unsafe.SpendExpired)
		switch r {
		case taken:
			prefetchWait := n.cfg.HorizonAhead / 2
			// A slot this far away means the key's queue is at least this
			// deep: the next slot is later still, so a prefetch that
			// accepts at most prefetchWait would only be refused (at 2/s
			// it doubled the calls to the leader per event).
			if kl.fetch == nil && kl.queued < len(kl.q) && at-now < int64(prefetchWait) && kl.covered(now) < max(2*kl.rtt, int64(n.cfg.LeaseSpan)/2) {
				// Other nodes' blocks may come first: accept a next
				// lease well into the horizon.
				c.startFetch(kl, key, prefetchWait)
			}
			kl.mu.Unlock()
			return raftpace.Reservation{At: n.epoch.Add(time.Duration(at)), UseBy: n.epoch.Add(time.Duration(useBy))}, nil
		case tooFar:
			kl.mu.Unlock()
			return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(at - now), MaxWait: maxWait}
		}
		f := kl.fetch
		if f == nil {
			f = c.startFetch(kl, key, time.Duration(remaining))
		}
		kl.mu.Unlock()
		select {
		case <-f.done:
			asked = true
		case <-ctx.Done():
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w", key, ctx.Err())
		case <-n.ctx.Done():
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		if f.err == nil {
			continue
		}
		var le *raftpace.LimitExceededError
		switch {
		case errors.As(f.err, &le):
			// The fetch asked with someone's maximum wait; a caller
			// willing to wait longer asks again with its own.
			if le.Wait > time.Duration(remaining) {
				return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: le.Wait, MaxWait: maxWait}
			}
		case retryable(f.err):
			if n.inFallback() {
				return raftpace.Reservation{}, errModeChanged
			}
			lastErr = f.err
			if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
				return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrNoLeader, err)
			}
			backoff = min(2*backoff, 50*time.Millisecond)
		default:
			return raftpace.Reservation{}, f.err
		}
	}
}

// startFetch requests a lease in the background; kl.mu is held.
func (c *leaseCache) startFetch(kl *keyLease, key string, maxWait time.Duration) *leaseFetch {
	f := &leaseFetch{done: make(chan struct{})}
	kl.fetch = f
	want := kl.want
	n := c.n
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		// Detached from the caller that started it: others wait on it too.
		ctx, cancel := context.WithTimeout(n.ctx, maxWait+5*time.Second)
		defer cancel()
		sent := n.now()
		l, err := n.fetchLease(ctx, key, want, maxWait)
		arrived := n.now()
		// The leader granted at least l.Held after sent (it may hold a
		// request for a horizon or for its share): the slots' use-by
		// counts from there, and only the rest of the round trip is
		// transit.
		from := sent + min(l.Held, arrived-sent)
		if err == nil && arrived-from > int64(n.cfg.UseGrace) {
			// Every slot's use-by passed in transit: drop the lease.
			n.stats.lateGrants.Add(1)
			n.log.Warn("lease arrived too late to use; asking again", "key", key, "round_trip", time.Duration(arrived-sent), "held_by_leader", time.Duration(l.Held))
			err = fmt.Errorf("%w: lease arrived after %v", wire.ErrRetry, time.Duration(arrived-sent))
		}
		kl.mu.Lock()
		if err == nil {
			kl.install(l, from, arrived)
			n.stats.leases.Add(1)
			n.stats.leasedSlots.Add(uint64(l.Count))
		}
		kl.fetch = nil
		f.err = err
		close(f.done)
		kl.mu.Unlock()
	}()
	return f
}

// fetchLease asks the leader (itself, or over RPC) for up to want slots.
func (n *Node) fetchLease(ctx context.Context, key string, want int, maxWait time.Duration) (wire.Lease, error) {
	l, err := n.pacer.Lease(ctx, n.ctx.Done(), key, n.cfg.NodeID, want, maxWait)
	if !errors.Is(err, wire.ErrNotLeader) {
		return l, err
	}
	addr, _ := n.raft.LeaderWithID()
	if addr == "" || string(addr) == n.Addr() {
		return wire.Lease{}, wire.ErrRetry
	}
	n.stats.forwarded.Add(1)
	// A paused or cut-off leader must not hold every caller of the key for
	// long: each call is bounded, then the leader is looked up again (a new
	// one may be granting, or this node may fall back).
	cctx, cancel := context.WithTimeout(ctx, leaderCallTimeout(maxWait))
	defer cancel()
	raw, err := n.trans.Call(cctx, string(addr), wire.MethodLease, wire.LeaseReq{Key: key, Holder: n.cfg.NodeID, Count: want, MaxWait: maxWait}.Encode())
	if err != nil {
		if ctx.Err() != nil {
			return wire.Lease{}, fmt.Errorf("node: lease %q: %w", key, ctx.Err())
		}
		return wire.Lease{}, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	resp, err := wire.DecodeLeaseResp(raw)
	if err != nil {
		return wire.Lease{}, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	if resp.Code == wire.CodeLimitExceeded {
		return wire.Lease{}, &raftpace.LimitExceededError{Key: key, Wait: resp.Wait, MaxWait: maxWait}
	}
	if resp.Code == wire.CodePaused {
		return wire.Lease{}, n.leaderPaused(key, resp.Wait)
	}
	if err := wire.ErrFor(resp.Code, resp.Msg); err != nil {
		if errors.Is(err, wire.ErrNotLeader) {
			return wire.Lease{}, err
		}
		if resp.Code == wire.CodeUnavailable {
			return wire.Lease{}, fmt.Errorf("%w: %w", wire.ErrRetry, err)
		}
		return wire.Lease{}, fmt.Errorf("node: lease %q: %w", key, err)
	}
	return resp.Lease, nil
}
