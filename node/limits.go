package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// SetLimit commits the limit for key. When it returns, reads of the limit on
// this node reflect it.
func (n *Node) SetLimit(ctx context.Context, key string, lim fsm.Limit) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: set limit: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := errors.Join(lim.Validate(), fsm.CheckMinRate(lim.Rate)); err != nil {
		return fmt.Errorf("node: set limit %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
	}
	what := fmt.Sprintf("set limit %q", key)
	return n.lc.CommitOnLeader(ctx, what, wire.MethodSetLimit, wire.SetLimitReq{Key: key, Limit: lim}.Encode(),
		func() (uint64, error) { return n.applyLimit(key, lim) })
}

func (n *Node) applyLimit(key string, lim fsm.Limit) (uint64, error) {
	index, err := n.commit(&fsm.SetLimit{Key: key, Limit: lim}, commitTimeout)
	if err != nil && !errors.Is(err, wire.ErrNotLeader) {
		return 0, fmt.Errorf("node: set limit %q: %w", key, err)
	}
	return index, err
}

// Limit returns the limit set for key, as this node has applied it.
func (n *Node) Limit(ctx context.Context, key string) (fsm.Limit, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return fsm.Limit{}, fmt.Errorf("node: limit: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Limit{}, err
	}
	lim, ok := n.state.Limit(key)
	if !ok {
		return fsm.Limit{}, fmt.Errorf("node: limit %q: %w", key, raftpace.ErrUnknownKey)
	}
	return lim, nil
}

// Limits returns every limit, as this node has applied them.
func (n *Node) Limits(ctx context.Context) (map[string]fsm.Limit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.state.Limits(), nil
}

// WaitForLeader blocks until the cluster has a leader that grants (this
// node's view), and returns its id.
func (n *Node) WaitForLeader(ctx context.Context) (string, error) {
	for {
		addr, id := n.raft.LeaderWithID()
		if addr != "" && (string(id) != n.cfg.NodeID || n.pacer.IsLeading()) {
			return string(id), nil
		}
		if err := sleepCtx(ctx, n.ctx, 10*time.Millisecond); err != nil {
			return "", fmt.Errorf("node: %w: %w", raftpace.ErrNoLeader, err)
		}
	}
}

// IsLeader reports whether this node is the leader and granting.
func (n *Node) IsLeader() bool { return n.pacer.IsLeading() }

// Remaining reads what key's limit has left (its rate's tokens, its
// quota's count) on the leader, where it is exact: one round trip from a
// follower. Without a leader it fails with ErrNoLeader when ctx ends: a
// follower's copy of the committed count bounds nothing the leader granted
// since.
func (n *Node) Remaining(ctx context.Context, key string) (r raftpace.Remaining, err error) {
	req, what := wire.RemainingReq{Key: key}.Encode(), "remaining "+key
	err = n.lc.UntilDone(ctx, what, func() (err error) {
		var raw []byte
		if n.leading() {
			raw = n.pacer.ServeRemaining(req)
		} else if raw, err = n.lc.Call(ctx, what, wire.MethodRemaining, req); err != nil {
			return err
		}
		resp, err := wire.DecodeRemainingResp(raw, key)
		if err != nil {
			return fmt.Errorf("%w: %w", wire.ErrRetry, err)
		}
		r = resp.Remaining
		return wire.LeaderErr(what, resp.Code, resp.Msg)
	})
	return r, err
}
