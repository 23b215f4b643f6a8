package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// The requests a node cannot serve itself — commit a limit, a cap, a pause,
// a release, remove a server, sync — share one shape: done locally when
// this node leads, else sent to the leader; retried with backoff while the
// failure is one a new attempt may cure (no leader yet, a leader change, a
// broken connection), until ctx ends. These helpers are that shape, once.
// A grant (a forwarded reservation, a lease) takes the same path, each
// call bounded by the request's own maximum wait: callLeaderWithin and
// grantErr.

// Which failures are retried, and the backoff, are package wire's
// (retry.go). commitTimeout bounds one raft commit on the leader.
const commitTimeout = 5 * time.Second

// untilDone runs once until it succeeds or fails for good. A wire.Retryable
// failure is retried with backoff (from 1ms, doubling, at most 50ms) until
// ctx ends, which gives ErrNoLeader naming what.
func (n *Node) untilDone(ctx context.Context, what string, once func() error) error {
	backoff := wire.RetryBackoffMin
	for {
		if n.closed() {
			return raftpace.ErrClosed
		}
		err := once()
		if err == nil || !wire.Retryable(err) {
			return err
		}
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			return fmt.Errorf("node: %s: %w: %w", what, raftpace.ErrNoLeader, err)
		}
		backoff = wire.NextBackoff(backoff)
	}
}

// leading reports whether raft says this node is the leader now.
func (n *Node) leading() bool { return n.raft.State() == raft.Leader }

// callLeader sends one RPC to the leader and returns its raw answer. No
// leader known, or a failed call, is wire.ErrRetry; ctx ending is not.
func (n *Node) callLeader(ctx context.Context, what string, method uint8, req []byte) ([]byte, error) {
	addr, _ := n.raft.LeaderWithID()
	if addr == "" {
		return nil, wire.ErrRetry
	}
	return n.callAt(ctx, ctx, string(addr), what, method, req)
}

// callAt sends one RPC to the leader at addr within cctx (ctx, or ctx with
// a bound). A failed call is wire.ErrRetry unless ctx, the caller's, ended:
// a bound that ran out is worth another attempt.
func (n *Node) callAt(ctx, cctx context.Context, addr, what string, method uint8, req []byte) ([]byte, error) {
	raw, err := n.trans.Call(cctx, addr, method, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node: %s: %w", what, ctx.Err())
		}
		return nil, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	return raw, nil
}

// callLeaderWithin is the path of a grant this node's pacer could not give
// (it does not lead): one request the leader may hold up to maxWait, sent
// to the leader (counted as forwarded) and its answer decoded. Like
// callLeader, no leader known or a failed call is wire.ErrRetry and ctx
// ending is not; so is raft naming this node, which won but has not passed
// its barrier yet. An answer that does not decode is wire.ErrRetry too.
// The code in the answer is the caller's to map (grantErr).
func (n *Node) callLeaderWithin(ctx context.Context, what string, method uint8, req []byte, maxWait time.Duration, decode func(raw []byte) error) error {
	addr, _ := n.raft.LeaderWithID()
	if addr == "" || string(addr) == n.Addr() {
		// No leader, or this node won but has not passed its barrier yet.
		return wire.ErrRetry
	}
	n.stats.forwarded.Add(1)
	// A paused or cut-off leader must not hold every caller of the key for
	// long: each call is bounded, then the leader is looked up again (a new
	// one may be granting, or this node may fall back).
	cctx, cancel := context.WithTimeout(ctx, wire.LeaderCallTimeout(maxWait))
	defer cancel()
	raw, err := n.callAt(ctx, cctx, string(addr), what, method, req)
	if err != nil {
		return err
	}
	if err := decode(raw); err != nil {
		return fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	return nil
}

// grantErr turns the code of a leader's answer to a grant of key (reserve,
// lease) into this node's error: a *raftpace.LimitExceededError when the
// wait is past maxWait; for a paused key, the pause recorded here and
// errLeaderPaused; wire.ErrNotLeader as this node's own pacer says it;
// else as wire.LeaderErr.
func (n *Node) grantErr(what, key string, code uint8, wait, maxWait time.Duration, msg string) error {
	switch code {
	case wire.CodeLimitExceeded:
		return &raftpace.LimitExceededError{Key: key, Wait: wait, MaxWait: maxWait}
	case wire.CodeQuotaExhausted:
		lim, _ := n.state.Limit(key)
		return &raftpace.QuotaExhaustedError{Key: key, Quota: lim.Quota, Per: lim.Per.String(), Reset: time.Now().Add(wait)}
	case wire.CodePaused:
		return n.leaderPaused(key, wait)
	case wire.CodeNotLeader:
		return wire.ErrNotLeader
	}
	return wire.LeaderErr(what, code, msg)
}

// indexOnLeader commits something on the leader once: local() when this
// node leads, else the RPC, whose answer is an IndexResp. It returns the
// raft index to wait for before a read here reflects the change.
func (n *Node) indexOnLeader(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) (uint64, error) {
	if n.leading() {
		return local()
	}
	raw, err := n.callLeader(ctx, what, method, req)
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

// commitOnLeader is indexOnLeader retried until done, then waits until this
// node applied the change.
func (n *Node) commitOnLeader(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) error {
	var index uint64
	err := n.untilDone(ctx, what, func() (err error) {
		index, err = n.indexOnLeader(ctx, what, method, req, local)
		return err
	})
	if err != nil {
		return err
	}
	return n.waitApplied(ctx, index)
}

// commitNow commits c within commitTimeout: the commit the rooms are given.
func (n *Node) commitNow(c fsm.Command) (uint64, error) { return n.commit(c, commitTimeout) }
