// Package client is what a worker calls before each event: Wait blocks until
// the event may go, Reserve says how long to wait or sheds at once.
//
// A Client paces through a Backend, normally the *node.Node the worker
// embeds:
//
//	n, err := node.New(cfg)
//	...
//	c := client.New(n)
//	if err := c.Wait(ctx, "google-images"); err != nil {
//		return err // ctx ended, or no limit is set for the key
//	}
//	fetch()
//
// Every method is safe for concurrent use. Waits are measured on this
// process's monotonic clock from the moment the grant arrives, which errs on
// the slow side: a grant is never used before the leader meant it. Nor much
// after: a grant must be used within the node's UseGrace of its time, and
// Wait forfeits (and asks again for) a slot it woke up too late to use.
//
// Beyond the rate, three fleet-wide controls:
//
//   - Pause: when a remote side refuses (429, 503) and says when to come
//     back, Pause holds every worker of the fleet off the key until then;
//     Wait and Reserve wait it out (or shed, past their maximum wait).
//     RefusalPolicy and ParseRetryAfter turn a refusal into that delay.
//   - Concurrency caps: Acquire (and AcquireSlot, AcquireSlots) takes a slot
//     of a key's fleet-wide cap for the guarded work, all or nothing over
//     several keys, and gives it back on Release; a slot not released is
//     reclaimed when its TTL ends.
//   - Register and RegisterCap declare a worker's policy at start-up: they
//     set a key's limit or cap if the cluster has none, and report a
//     conflict (ErrPolicyConflict) instead of overwriting other values.
//
// Transport wraps an http.RoundTripper so that every request is paced,
// takes its concurrency slots, and pauses its key on a refusal.
package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
)

// Limit is a key's rate (events per second) and burst.
type Limit = fsm.Limit

// Errors, shared with package node; test with errors.Is.
var (
	// ErrLimitExceeded: the wait would exceed the maximum the caller allowed
	// (Reserve's maxWait, or the context's deadline for Wait). Nothing was
	// consumed. errors.As to *raftpace.LimitExceededError gives the wait.
	ErrLimitExceeded = raftpace.ErrLimitExceeded
	// ErrUnknownKey: no limit is set for the key; raftpace never admits an
	// event for a key it has no rate for.
	ErrUnknownKey = raftpace.ErrUnknownKey
	// ErrNoLeader: no leader could be reached before the context ended.
	ErrNoLeader = raftpace.ErrNoLeader
	// ErrClosed: the node is closed.
	ErrClosed = raftpace.ErrClosed
	// ErrInvalidRequest: a key, count or limit was invalid.
	ErrInvalidRequest = raftpace.ErrInvalidRequest
	// ErrPaused: the key is paused (see Pause) for longer than the maximum
	// wait the caller allowed. Nothing was consumed. errors.As to
	// *raftpace.PausedError gives the remaining pause; it also matches
	// ErrLimitExceeded, so a caller that sheds on one sheds on the other.
	ErrPaused = raftpace.ErrPaused
	// ErrConcurrencyLimit: every slot of a key's concurrency cap stayed in
	// use for the caller's whole maximum wait (Acquire). errors.As to
	// *raftpace.ConcurrencyLimitError names the full keys.
	ErrConcurrencyLimit = raftpace.ErrConcurrencyLimit
	// ErrPolicyConflict: Register or RegisterCap found the key already set
	// to other values; nothing was changed. errors.As to
	// *raftpace.PolicyConflictError names both.
	ErrPolicyConflict = raftpace.ErrPolicyConflict
)

// LimitExceededError carries the wait that exceeded the caller's maximum.
type LimitExceededError = raftpace.LimitExceededError

// PausedError carries the remaining pause of a key that outlasted the
// caller's maximum wait.
type PausedError = raftpace.PausedError

// ConcurrencyLimitError names the keys whose caps stayed full for the
// caller's maximum wait.
type ConcurrencyLimitError = raftpace.ConcurrencyLimitError

// PolicyConflictError names the values a registration asked for and the
// values the cluster holds.
type PolicyConflictError = raftpace.PolicyConflictError

// Slot is a held concurrency slot on one or more keys: the holder must be
// done with the guarded work by its Deadline, when the slot is reclaimed
// however its holder fares.
type Slot = raftpace.Slot

// Reservation is a grant: use the events at At, and no later than UseBy.
type Reservation = raftpace.Reservation

// Want is one key of a reservation over several keys: Count events of
// Key (WaitAll, ReserveAll).
type Want = raftpace.Want

// Backend grants reservations, pauses and concurrency slots, and stores
// limits and caps. *node.Node implements it; its methods document the
// semantics. Reserve must hold a caller while the key is paused (or return
// a *raftpace.PausedError past maxWait): Wait relies on it to obey pauses.
type Backend interface {
	// ReserveAll grants the events of every want at one instant, or
	// consumes none (a reservation of one key is the list of one).
	ReserveAll(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error)
	Forfeit(raftpace.Reservation)
	SetLimit(ctx context.Context, key string, lim fsm.Limit) error
	Limit(ctx context.Context, key string) (fsm.Limit, error)
	Limits(ctx context.Context) (map[string]fsm.Limit, error)
	// Remaining reads what a key's limit has left, from the leader.
	Remaining(ctx context.Context, key string) (raftpace.Remaining, error)

	Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error)
	PausedFor(key string) time.Duration

	AcquireSlots(ctx context.Context, keys []string, ttl, maxWait time.Duration) (raftpace.Slot, error)
	ReleaseSlot(ctx context.Context, s raftpace.Slot) error
	SetCap(ctx context.Context, key string, max int) error
	Cap(ctx context.Context, key string) (int, error)
	Caps(ctx context.Context) (map[string]int, error)
}

var _ Backend = (*node.Node)(nil)

// Client paces a worker's events through a Backend.
type Client struct {
	b Backend
}

// New returns a Client that paces through b.
func New(b Backend) *Client { return &Client{b: b} }

// noDeadline is the longest a Wait (or Acquire) without a context deadline
// may queue.
const noDeadline = 10 * time.Minute

// maxWaitFor is the maximum wait a call under ctx allows: the time to its
// deadline, or noDeadline. Negative once the deadline has passed.
func maxWaitFor(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return noDeadline
}

// Wait blocks until one event of key may go. It is WaitN(ctx, key, 1).
func (c *Client) Wait(ctx context.Context, key string) error { return c.WaitN(ctx, key, 1) }

// WaitN blocks until n events of key may go at once (n must not exceed the
// key's burst). If the context has a deadline that the wait would pass, it
// returns ErrLimitExceeded at once without consuming anything. If the
// context ends while waiting, the reserved events are forfeited (never
// handed to another caller), and WaitN returns the context's error. If this
// goroutine wakes too late to use its slot (past UseBy: an overloaded host),
// it forfeits the slot and reserves again; so it does if the key was paused
// (Pause) while it slept.
func (c *Client) WaitN(ctx context.Context, key string, n int) error {
	return c.WaitAll(ctx, Want{Key: key, Count: n})
}

// WaitAll blocks until the events of every want may go at once, each key
// within its own limit (an event that must respect a tenant's limit and a
// global one, say). It is WaitN over several keys, with the same rules:
// nothing is consumed on any key while the wait would pass the context's
// deadline, and a refusal names the key that set the wait. No slot of one
// key is held while another is awaited: the leader grants all at one
// instant, in one request.
func (c *Client) WaitAll(ctx context.Context, wants ...Want) error {
	what := "wait " + raftpace.KeysOf(wants)
	var deadline time.Time
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	} else {
		deadline = time.Now().Add(noDeadline)
	}
	for {
		maxWait := time.Until(deadline)
		if maxWait < 0 {
			return fmt.Errorf("client: %s: %w", what, context.DeadlineExceeded)
		}
		r, err := c.b.ReserveAll(ctx, wants, maxWait)
		var qe *raftpace.QuotaExhaustedError
		if errors.As(err, &qe) && !qe.Reset.After(deadline) {
			// A spent quota is never reserved ahead of its next window:
			// sleep to it and ask again.
			if err := sleepUntil(ctx, qe.Reset); err != nil {
				return fmt.Errorf("client: %s: %w", what, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("client: %s: %w", what, err)
		}
		if err := sleepUntil(ctx, r.At); err != nil {
			c.b.Forfeit(r)
			return fmt.Errorf("client: %s: %w", what, err)
		}
		// A refusal may have paused a key while this caller slept: its
		// slot then goes unused, and ReserveAll holds it until the pause
		// ends.
		if slices.ContainsFunc(wants, func(w Want) bool { return c.b.PausedFor(w.Key) > 0 }) {
			c.b.Forfeit(r)
			continue
		}
		if !time.Now().After(r.UseBy) {
			return nil
		}
		c.b.Forfeit(r)
	}
}

// Remaining reads what key's limit has left, as its leader counts it:
// the events the rate would grant at once fleet-wide (Tokens) and, for a
// limit with a quota, what is used and left of the window and when it
// resets. It costs a round trip to the leader; it is a read for planning
// and dashboards, not a reservation.
func (c *Client) Remaining(ctx context.Context, key string) (raftpace.Remaining, error) {
	r, err := c.b.Remaining(ctx, key)
	if err != nil {
		return raftpace.Remaining{}, fmt.Errorf("client: remaining %q: %w", key, err)
	}
	return r, nil
}

// sleepUntil sleeps until t (not at all when it has passed), or until ctx
// ends (its error).
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reserve reserves one event of key and returns how long the caller must
// wait before using it. If that would exceed maxWait, it consumes nothing
// and returns an error wrapping ErrLimitExceeded (shed instead of sleeping).
// The caller must use the event within the node's UseGrace after the delay
// ends (ReserveN returns the exact deadline); Wait does this for you.
func (c *Client) Reserve(ctx context.Context, key string, maxWait time.Duration) (time.Duration, error) {
	r, err := c.ReserveN(ctx, key, 1, maxWait)
	if err != nil {
		return 0, err
	}
	return r.Delay(), nil
}

// ReserveN reserves n events used at once and returns the grant: use them at
// r.At, no later than r.UseBy (else call Forfeit and reserve again).
func (c *Client) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (Reservation, error) {
	return c.ReserveAll(ctx, maxWait, Want{Key: key, Count: n})
}

// ReserveAll reserves the events of every want, to be used at once at
// r.At, no later than r.UseBy: all of them, or (when the wait would
// exceed maxWait, or a key is unknown) none, with an error naming the key.
func (c *Client) ReserveAll(ctx context.Context, maxWait time.Duration, wants ...Want) (Reservation, error) {
	r, err := c.b.ReserveAll(ctx, wants, maxWait)
	if err != nil {
		return Reservation{}, fmt.Errorf("client: reserve %s: %w", raftpace.KeysOf(wants), err)
	}
	return r, nil
}

// Forfeit tells the node a reservation went unused (for its counters). The
// slot is not given to anyone else.
func (c *Client) Forfeit(r Reservation) { c.b.Forfeit(r) }

// SetLimit sets key's rate and burst for the whole cluster; when it returns
// the limit is committed and visible to reads through this client.
func (c *Client) SetLimit(ctx context.Context, key string, lim Limit) error {
	return c.b.SetLimit(ctx, key, lim)
}

// Limit returns key's limit, or an error wrapping ErrUnknownKey.
func (c *Client) Limit(ctx context.Context, key string) (Limit, error) {
	return c.b.Limit(ctx, key)
}

// Limits returns every key's limit.
func (c *Client) Limits(ctx context.Context) (map[string]Limit, error) {
	return c.b.Limits(ctx)
}

// Pause records a fleet-wide pause of key for d (in (0, 24h]): no event of
// key is admitted by any node until it ends, and Wait and Reserve hold their
// callers (or shed them, past their maximum wait) meanwhile. Pauses do not
// add up: the node keeps the latest deadline of every hint, so a shorter
// pause never cuts a longer one short. Pause returns the remaining pause in
// force after the call. On an error (no leader before ctx ended) this
// process's node still holds its own callers off for d.
func (c *Client) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	rem, err := c.b.Pause(ctx, key, d)
	if err != nil {
		return rem, fmt.Errorf("client: pause %q: %w", key, err)
	}
	return rem, nil
}

// PausedFor returns key's remaining pause as this process's node sees it;
// 0 if none.
func (c *Client) PausedFor(key string) time.Duration { return c.b.PausedFor(key) }

// SetCap sets key's fleet-wide concurrency cap (the most slots held at once)
// for the whole cluster.
func (c *Client) SetCap(ctx context.Context, key string, max int) error {
	return c.b.SetCap(ctx, key, max)
}

// Cap returns key's concurrency cap, or an error wrapping ErrUnknownKey.
func (c *Client) Cap(ctx context.Context, key string) (int, error) {
	return c.b.Cap(ctx, key)
}

// Caps returns every key's concurrency cap.
func (c *Client) Caps(ctx context.Context) (map[string]int, error) {
	return c.b.Caps(ctx)
}
