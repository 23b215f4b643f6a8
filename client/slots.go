package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// releaseTimeout bounds a release: it runs on a fresh context, since the
// caller's may be done by then.
const releaseTimeout = 5 * time.Second

// Held is a concurrency slot this process holds (see Acquire). Its methods
// are safe for concurrent use.
type Held struct {
	c    *Client
	slot Slot
	once sync.Once
}

// Acquire takes one slot of each of keys' fleet-wide concurrency caps at
// once (all or nothing, so several keys cannot deadlock) for at most ttl.
// It waits for room until ctx's deadline (at most 10 minutes without one);
// past it, it returns an error wrapping ErrConcurrencyLimit and holds
// nothing. A key without a cap gives ErrUnknownKey.
//
// The holder must be done with the guarded work by h.Deadline(), when the
// slot is reclaimed however its holder fares: bound the work with
// h.Context. Call h.Release when done.
func (c *Client) Acquire(ctx context.Context, keys []string, ttl time.Duration) (*Held, error) {
	maxWait := maxWaitFor(ctx)
	if maxWait < 0 {
		return nil, fmt.Errorf("client: acquire %q: %w", keys, context.DeadlineExceeded)
	}
	s, err := c.b.AcquireSlots(ctx, keys, ttl, maxWait)
	if err != nil {
		return nil, fmt.Errorf("client: acquire %q: %w", keys, err)
	}
	return &Held{c: c, slot: s}, nil
}

// AcquireSlot takes one slot of key's concurrency cap, like Acquire, and
// returns the function that gives it back. See AcquireSlots.
func (c *Client) AcquireSlot(ctx context.Context, key string, ttl time.Duration) (release func(), err error) {
	return c.AcquireSlots(ctx, []string{key}, ttl)
}

// AcquireSlots takes one slot of each of keys' caps at once (all or
// nothing), like Acquire, and returns the function that gives them back:
// Held.Release, which may be called any number of times. The guarded work
// must be done within ttl; use Acquire to learn the exact deadline.
func (c *Client) AcquireSlots(ctx context.Context, keys []string, ttl time.Duration) (release func(), err error) {
	h, err := c.Acquire(ctx, keys, ttl)
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// Slot returns the held slot.
func (h *Held) Slot() Slot { return h.slot }

// Deadline is when the slot is reclaimed, released or not: the guarded work
// must be done by then.
func (h *Held) Deadline() time.Time { return h.slot.Deadline }

// Context returns parent bounded by the slot's deadline, so the guarded
// work cannot outlive the slot. Call the CancelFunc when done, as with
// context.WithDeadline.
func (h *Held) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, h.slot.Deadline)
}

// Release gives the slot back. Only the first call does anything; later
// ones return at once. It runs on a fresh context bounded by a few seconds
// (the caller's context may be done), so it may block that long when no
// leader answers. Its errors are dropped: a slot that could not be given
// back is reclaimed at its deadline anyway (the slot's TTL).
func (h *Held) Release() {
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = h.c.b.ReleaseSlot(ctx, h.slot)
	})
}
