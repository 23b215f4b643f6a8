package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// The requests a node cannot serve itself — commit a limit, a cap, a pause,
// a release, remove a server, sync — share one shape: done locally when
// this node leads, else sent to the leader; retried with backoff while the
// failure is one a new attempt may cure (no leader yet, a leader change, a
// broken connection), until ctx ends. These helpers are that shape, once.

// untilDone runs once until it succeeds or fails for good. A retryable
// failure is retried with backoff (from 1ms, doubling, at most 50ms) until
// ctx ends, which gives ErrNoLeader naming what.
func (n *Node) untilDone(ctx context.Context, what string, once func() error) error {
	backoff := time.Millisecond
	for {
		if n.closed() {
			return raftpace.ErrClosed
		}
		err := once()
		if err == nil || !retryable(err) {
			return err
		}
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			return fmt.Errorf("node: %s: %w: %w", what, raftpace.ErrNoLeader, err)
		}
		backoff = min(2*backoff, 50*time.Millisecond)
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
	raw, err := n.trans.Call(ctx, string(addr), method, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node: %s: %w", what, ctx.Err())
		}
		return nil, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	return raw, nil
}

// leaderErr turns a leader's answer code into this node's error: retryable
// when the leader moved on or could not commit, else the sentinel the code
// stands for.
func leaderErr(what string, code uint8, msg string) error {
	err := wire.ErrFor(code, msg)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wire.ErrNotLeader) || code == wire.CodeUnavailable:
		return fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	return fmt.Errorf("node: %s: %w", what, err)
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
	if err := leaderErr(what, resp.Code, resp.Msg); err != nil {
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
