package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
)

// Register declares, at start-up, the limit this worker expects for key.
// If the cluster has no limit for key it sets lim; if it already has lim,
// Register does nothing; if it has other values, Register changes nothing
// and returns a *PolicyConflictError (matching ErrPolicyConflict) naming
// both, as "rate=R/s burst=B" (and " mode=dry-run" for a limit in dry run:
// a limit in dry run and the same limit enforced differ). An operator changes a registered limit with
// SetLimit (`raftpace limit set`), not by registering other values.
//
// Register first catches this node up with the leader (when the Backend
// can: *node.Node's Sync), so a worker that just restarted compares with
// the cluster's current value, not with state it has not applied yet —
// else it would overwrite an operator's run-time change.
//
// After setting, Register reads the limit back and reports a conflict if a
// concurrent registration of other values won. The cluster has no
// compare-and-set, so two registrations racing closely may both return nil
// with the later one's values in force; registrations that agree are
// always safe.
func (c *Client) Register(ctx context.Context, key string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("client: register %q: %w: %w", key, ErrInvalidRequest, err)
	}
	if err := c.sync(ctx); err != nil {
		return fmt.Errorf("client: register %q: %w", key, err)
	}
	return c.register(ctx, key, lim)
}

// registerInFlight is how many keys RegisterAll sets at once.
const registerInFlight = 32

// RegisterAll is Register for every key of limits (a policy file's): one
// catch-up with the leader, then up to 32 keys set at once, which raft
// commits together. One key after another, 10,000 keys took an agent over
// 100 s to register (a commit each, in turn), while their workers waited
// for their limits. It returns the error of each key that failed or
// conflicts (a *PolicyConflictError); nil when every key is registered.
func (c *Client) RegisterAll(ctx context.Context, limits map[string]Limit) map[string]error {
	if err := c.sync(ctx); err != nil {
		failed := make(map[string]error, len(limits))
		for key := range limits {
			failed[key] = fmt.Errorf("client: register %q: %w", key, err)
		}
		return failed
	}
	var mu sync.Mutex
	var failed map[string]error
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(registerInFlight, len(limits)) {
		wg.Go(func() {
			for key := range work {
				if err := c.register(ctx, key, limits[key]); err != nil {
					mu.Lock()
					if failed == nil {
						failed = make(map[string]error)
					}
					failed[key] = err
					mu.Unlock()
				}
			}
		})
	}
	for key := range limits {
		work <- key
	}
	close(work)
	wg.Wait()
	return failed
}

// register is Register once caught up with the leader.
func (c *Client) register(ctx context.Context, key string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("client: register %q: %w: %w", key, ErrInvalidRequest, err)
	}
	cur, err := c.b.Limit(ctx, key)
	switch {
	case err == nil:
		return limitConflict(key, lim, cur)
	case !errors.Is(err, ErrUnknownKey):
		return fmt.Errorf("client: register %q: %w", key, err)
	}
	if err := c.b.SetLimit(ctx, key, lim); err != nil {
		return fmt.Errorf("client: register %q: %w", key, err)
	}
	cur, err = c.b.Limit(ctx, key)
	if err != nil {
		// Deleted between the two calls, or ctx ended: not a conflict.
		return fmt.Errorf("client: register %q: reading it back: %w", key, err)
	}
	return limitConflict(key, lim, cur)
}

// RegisterCap declares, at start-up, the concurrency cap this worker
// expects for key, like Register: it sets max if the cluster has no cap for
// key, does nothing if it has max, and returns a *PolicyConflictError
// ("max=N") if it has another.
func (c *Client) RegisterCap(ctx context.Context, key string, max int) error {
	if max < 1 || max > fsm.MaxCap {
		return fmt.Errorf("client: register cap %q: %w: max %d must be 1..%d", key, ErrInvalidRequest, max, fsm.MaxCap)
	}
	if err := c.sync(ctx); err != nil {
		return fmt.Errorf("client: register cap %q: %w", key, err)
	}
	cur, err := c.b.Cap(ctx, key)
	switch {
	case err == nil:
		return capConflict(key, max, cur)
	case !errors.Is(err, ErrUnknownKey):
		return fmt.Errorf("client: register cap %q: %w", key, err)
	}
	if err := c.b.SetCap(ctx, key, max); err != nil {
		return fmt.Errorf("client: register cap %q: %w", key, err)
	}
	cur, err = c.b.Cap(ctx, key)
	if err != nil {
		return fmt.Errorf("client: register cap %q: reading it back: %w", key, err)
	}
	return capConflict(key, max, cur)
}

func limitConflict(key string, want, cur Limit) error {
	if want == cur {
		return nil
	}
	return &raftpace.PolicyConflictError{Key: key, Registered: formatLimit(want), Current: formatLimit(cur)}
}

func capConflict(key string, want, cur int) error {
	if want == cur {
		return nil
	}
	return &raftpace.PolicyConflictError{Key: key, Registered: formatCap(want), Current: formatCap(cur)}
}

func formatLimit(l Limit) string {
	s := "rate=" + strconv.FormatFloat(l.Rate, 'g', -1, 64) + "/s burst=" + strconv.Itoa(l.Burst)
	if l.DryRun {
		s += " mode=dry-run"
	}
	return s
}

func formatCap(max int) string { return "max=" + strconv.Itoa(max) }

// syncer is a Backend that can catch up with the leader before a read.
type syncer interface {
	Sync(ctx context.Context) error
}

var _ syncer = (*node.Node)(nil)

func (c *Client) sync(ctx context.Context) error {
	if s, ok := c.b.(syncer); ok {
		return s.Sync(ctx)
	}
	return nil
}
