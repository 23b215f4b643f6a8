package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// fetchSlack is how long past its maximum wait a fetch, detached from the
// callers waiting on it, may run before it is cancelled.
const fetchSlack = 5 * time.Second

// Reserve serves one event of key from the node's leases, fetching a lease
// when none is left (or soon, ahead of need).
func (c *Cache) Reserve(ctx context.Context, key string, maxWait time.Duration) (raftpace.Reservation, error) {
	d := &c.d
	kl := c.get(key)
	grace := int64(d.UseGrace)
	begin := d.Now()
	backoff := d.BackoffMin
	var lastErr error
	asked := false // whether a fetch this call waited for has answered
	// retake: a fetch just brought a lease; the first take from it is made
	// even if the round trip outlasted maxWait (a slot free now is within
	// any maximum wait). Once per call, so a lease that others drain first
	// cannot keep it going.
	retake, retaken := false, false
	for {
		now := d.Now()
		remaining := int64(maxWait) - (now - begin)
		if remaining < 0 && (!asked || retake) {
			// A zero (or tiny) max wait still deserves one answer from
			// the leader: a slot free now, or why not (an unknown key
			// must say so, not "limit exceeded").
			remaining = 0
		}
		retake = false
		if remaining < 0 {
			if lastErr != nil {
				return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w within max wait %v: %w", key, raftpace.ErrNoLeader, maxWait, lastErr)
			}
			return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(-remaining), MaxWait: maxWait}
		}
		kl.mu.Lock()
		kl.last = now
		at, useBy, r := kl.take(now, grace, remaining, d.SpendExpired)
		switch r {
		case taken:
			prefetchWait := d.HorizonAhead / 2
			// A slot this far away means the key's queue is at least this
			// deep: the next slot is later still, so a prefetch that
			// accepts at most prefetchWait would only be refused (at 2/s
			// it doubled the calls to the leader per event).
			if kl.fetch == nil && kl.queued < len(kl.q) && at-now < int64(prefetchWait) && kl.covered(now) < max(2*kl.rtt, int64(d.LeaseSpan)/2) {
				// Other nodes' blocks may come first: accept a next
				// lease well into the horizon.
				c.startFetch(kl, key, prefetchWait)
			}
			kl.mu.Unlock()
			return raftpace.Reservation{At: d.Epoch.Add(time.Duration(at)), UseBy: d.Epoch.Add(time.Duration(useBy))}, nil
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
		case <-d.Ctx.Done():
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		if f.err == nil {
			retake, retaken = !retaken, true
			continue
		}
		var le *raftpace.LimitExceededError
		switch {
		case errors.As(f.err, &le):
			// The fetch asked with someone's maximum wait; a caller
			// willing to wait longer asks again with its own.
			if le.Wait > time.Duration(remaining) {
				if maxWait == 0 {
					c.keepComing(kl, key)
				}
				return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: le.Wait, MaxWait: maxWait}
			}
		case d.Retryable(f.err):
			if d.InFallback() {
				return raftpace.Reservation{}, ErrModeChanged
			}
			lastErr = f.err
			if err := d.Sleep(ctx, backoff); err != nil {
				return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrNoLeader, err)
			}
			backoff = min(2*backoff, d.BackoffMax)
		default:
			return raftpace.Reservation{}, f.err
		}
	}
}

// keepComing starts a fetch that accepts slots up to half the horizon
// ahead, once the leader refused callers that take only a slot due now
// (a maxWait of 0; every caller of a limit in dry run). Without it such a
// node never holds a lease while the other nodes' prefetches keep the
// key's cursor ahead of now, and its callers get no share of the rate
// (one of two nodes got none of 40 slots in TestNode_DryRunAdmitsAndCounts).
// With it they take the slots as they fall due, like any other node's.
func (c *Cache) keepComing(kl *keyLease, key string) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	ahead := c.d.HorizonAhead / 2
	if kl.fetch == nil && kl.queued < len(kl.q) && kl.covered(c.d.Now()) < int64(ahead) {
		c.startFetch(kl, key, ahead)
	}
}

// startFetch requests a lease in the background; kl.mu is held.
func (c *Cache) startFetch(kl *keyLease, key string, maxWait time.Duration) *leaseFetch {
	f := &leaseFetch{done: make(chan struct{})}
	kl.fetch = f
	want := kl.want
	d := &c.d
	d.WG.Add(1)
	go func() {
		defer d.WG.Done()
		// Detached from the caller that started it: others wait on it too.
		ctx, cancel := context.WithTimeout(d.Ctx, maxWait+fetchSlack)
		defer cancel()
		sent := d.Now()
		l, arrived, err := d.Fetch(ctx, key, want, maxWait)
		if arrived == 0 {
			arrived = d.Now()
		}
		// The leader granted at least l.Held after sent (it may hold a
		// request for a horizon or for its share): the slots' use-by
		// counts from there, and only the rest of the round trip is
		// transit.
		from := sent + min(l.Held, arrived-sent)
		if err == nil && arrived-from > int64(d.UseGrace) {
			// Every slot's use-by passed in transit: drop the lease.
			// Whatever a slot's offset: it is placed from the arrival
			// and used by from + offset + UseGrace, a window that is
			// empty once the transit passes UseGrace.
			d.Count.LateGrants.Add(1)
			d.Log.Warn("lease arrived too late to use; asking again", "key", key, "round_trip", time.Duration(arrived-sent), "held_by_leader", time.Duration(l.Held))
			err = fmt.Errorf("%w: lease arrived after %v", wire.ErrRetry, time.Duration(arrived-sent))
		}
		kl.mu.Lock()
		if err == nil {
			kl.install(l, from, arrived)
			d.Count.Leases.Add(1)
			d.Count.LeasedSlots.Add(uint64(l.Count))
		}
		kl.fetch = nil
		f.err = err
		close(f.done)
		kl.mu.Unlock()
	}()
	return f
}
