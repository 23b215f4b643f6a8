// Package leadercall is a node's one path to its leader. The requests a
// node cannot serve itself (commit a limit, a cap, a pause, a release,
// remove a server, sync) share one shape: done locally when this node
// leads, else sent to the leader; retried with backoff while the failure
// is one a new attempt may cure (no leader yet, a leader change, a broken
// connection), until ctx ends. A grant (a forwarded reservation, a lease)
// takes the same path, each call bounded by the request's own maximum
// wait (Within, Raw).
//
// # What it promises
//
//   - No leader known, a failed call, or raft naming this node before it
//     passed its barrier, is wire.ErrRetry; the caller's ctx ending is
//     not (it is ctx's error, wrapped).
//   - A call to the leader is bounded by wire.LeaderCallTimeout of its
//     maximum wait: a paused or cut-off leader does not hold a caller for
//     long; the leader is looked up again.
//   - UntilDone retries wire.Retryable failures with backoff from
//     wire.RetryBackoffMin, doubling, and gives raftpace.ErrNoLeader
//     naming what when ctx ends; raftpace.ErrClosed once the node closes.
//
// # What it may depend on
//
// Packages raftpace and node/wire. Its node gives it, in Deps, the leader's
// address, its own, a transport call, raft's answer to "do I lead", and
// how to wait until an index is applied.
package leadercall

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// Deps is what a Caller is given by its node.
type Deps struct {
	Leader  func() string // the leader's address as raft knows it; "" none
	Self    func() string // this node's address
	Leading func() bool   // raft says this node is the leader now
	// Call sends one request to the transport at addr.
	Call        func(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error)
	WaitApplied func(ctx context.Context, index uint64) error
	Forwarded   *atomic.Uint64  // counts the grants forwarded (Within)
	Ctx         context.Context // the node's lifetime
}

// Caller is a node's path to its leader.
type Caller struct{ d Deps }

func New(d Deps) *Caller { return &Caller{d: d} }

// UntilDone runs once until it succeeds or fails for good. A wire.Retryable
// failure is retried with backoff (from 1ms, doubling, at most 50ms) until
// ctx ends, which gives ErrNoLeader naming what.
func (c *Caller) UntilDone(ctx context.Context, what string, once func() error) error {
	backoff := wire.RetryBackoffMin
	for {
		if c.d.Ctx.Err() != nil {
			return raftpace.ErrClosed
		}
		err := once()
		if err == nil || !wire.Retryable(err) {
			return err
		}
		if err := Sleep(ctx, c.d.Ctx, backoff); err != nil {
			return fmt.Errorf("node: %s: %w: %w", what, raftpace.ErrNoLeader, err)
		}
		backoff = wire.NextBackoff(backoff)
	}
}

// Sleep sleeps d, or returns early with ctx's error or, when the node
// (nodeCtx) ends, raftpace.ErrClosed.
func Sleep(ctx, nodeCtx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-nodeCtx.Done():
		return raftpace.ErrClosed
	}
}

// Call sends one RPC to the leader and returns its raw answer. No leader
// known, or a failed call, is wire.ErrRetry; ctx ending is not.
func (c *Caller) Call(ctx context.Context, what string, method uint8, req []byte) ([]byte, error) {
	addr := c.d.Leader()
	if addr == "" {
		return nil, wire.ErrRetry
	}
	return c.callAt(ctx, ctx, addr, what, method, req)
}

// callAt sends one RPC to the leader at addr within cctx (ctx, or ctx with
// a bound). A failed call is wire.ErrRetry unless ctx, the caller's, ended:
// a bound that ran out is worth another attempt.
func (c *Caller) callAt(ctx, cctx context.Context, addr, what string, method uint8, req []byte) ([]byte, error) {
	raw, err := c.d.Call(cctx, addr, method, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node: %s: %w", what, ctx.Err())
		}
		return nil, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	return raw, nil
}

// Within is the path of a grant this node's pacer could not give (it does
// not lead): one request the leader may hold up to maxWait, sent to the
// leader (counted as forwarded) and its answer decoded. An answer that
// does not decode is wire.ErrRetry too. The code in the answer is the
// caller's to map.
func (c *Caller) Within(ctx context.Context, what string, method uint8, req []byte, maxWait time.Duration, decode func(raw []byte) error) error {
	c.d.Forwarded.Add(1)
	raw, addr, err := c.Raw(ctx, what, method, req, maxWait)
	if err != nil {
		return err
	}
	if err := decode(raw); err != nil {
		return fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	return nil
}

// Raw is Within's call, its answer undecoded and uncounted, and the
// leader's address it went to.
func (c *Caller) Raw(ctx context.Context, what string, method uint8, req []byte, maxWait time.Duration) ([]byte, string, error) {
	addr := c.d.Leader()
	if addr == "" || addr == c.d.Self() {
		// No leader, or this node won but has not passed its barrier yet.
		return nil, "", wire.ErrRetry
	}
	cctx, cancel := context.WithTimeout(ctx, wire.LeaderCallTimeout(maxWait))
	defer cancel()
	raw, err := c.callAt(ctx, cctx, addr, what, method, req)
	return raw, addr, err
}

// IndexOnLeader commits something on the leader once: local() when this
// node leads, else the RPC, whose answer is an IndexResp. It returns the
// raft index to wait for before a read here reflects the change.
func (c *Caller) IndexOnLeader(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) (uint64, error) {
	if c.d.Leading() {
		return local()
	}
	raw, err := c.Call(ctx, what, method, req)
	if err != nil {
		return 0, err
	}
	resp, err := wire.DecodeIndexResp(raw)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	if err := wire.LeaderErr(what, resp.Code, resp.Msg); err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// CommitOnLeader is IndexOnLeader retried until done, then waits until
// this node applied the change.
func (c *Caller) CommitOnLeader(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) error {
	var index uint64
	err := c.UntilDone(ctx, what, func() (err error) {
		index, err = c.IndexOnLeader(ctx, what, method, req, local)
		return err
	})
	if err != nil {
		return err
	}
	return c.d.WaitApplied(ctx, index)
}
