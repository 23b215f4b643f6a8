package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/node/wire"
)

// leaderSyncIndex returns an index covering every entry committed so far:
// raft's barrier makes sure the leader applied all of them first.
func (n *Node) leaderSyncIndex() (uint64, error) {
	if err := n.raft.Barrier(commitTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, wire.ErrNotLeader
		}
		return 0, fmt.Errorf("%w: barrier: %w", wire.ErrRetry, err)
	}
	return n.raft.AppliedIndex(), nil
}

// Sync returns once this node has applied every entry the leader had
// committed when Sync was called, so that reads on this node (Limit, Cap,
// Caps, Limits) are then at least as fresh as the leader's were. A node
// that just started or restarted may otherwise read state it has not
// caught up on yet. Register does this before comparing.
func (n *Node) Sync(ctx context.Context) error {
	var index uint64
	err := n.lc.UntilDone(ctx, "sync", func() (err error) {
		index, err = n.lc.IndexOnLeader(ctx, "sync", wire.MethodSync, []byte{wire.Version}, n.leaderSyncIndex)
		return err
	})
	if err != nil {
		return err
	}
	// raft's applied index, not the state's: the index may be a barrier or
	// configuration entry the state never sees.
	for n.raft.AppliedIndex() < index {
		if err := sleepCtx(ctx, n.ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("node: sync: waiting to apply index %d: %w", index, err)
		}
	}
	return nil
}
