package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// errLeaderPaused: the leader refused a grant because the key is paused.
// The node has recorded the pause locally; Reserve checks its gate again.
var errLeaderPaused = errors.New("node: the key is paused on the leader")

// leaderPaused records a pause the leader reported and returns
// errLeaderPaused.
func (n *Node) leaderPaused(key string, remaining time.Duration) error {
	if remaining > 0 {
		now := n.now()
		n.pausedHere.extend(key, now+int64(min(remaining, fsm.MaxPause)), now)
	}
	return fmt.Errorf("%w: %q for another %v", errLeaderPaused, key, remaining)
}

// handleGateRPC serves pauses, slots and caps on the leader.
func (n *Node) handleGateRPC(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	leading := n.raft.State() == raft.Leader
	switch method {
	case wire.MethodPause:
		m, err := wire.DecodePauseReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err == nil && (m.For <= 0 || m.For > fsm.MaxPause) {
			err = fmt.Errorf("pause %v must be in (0, %v]", m.For, fsm.MaxPause)
		}
		if err != nil {
			return wire.PauseResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if !leading {
			return wire.PauseResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		remaining, index, err := n.leaderPause(m.Key, m.For)
		return wire.PauseResp{Code: wire.CodeFor(err), Index: index, Remaining: remaining, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodAcquireSlots:
		m, err := wire.DecodeAcquireReq(req)
		if err == nil {
			err = fsm.ValidateID(m.ID)
		}
		if err == nil {
			err = fsm.ValidateID(m.Holder)
		}
		if err == nil {
			var keys []string
			keys, err = checkSlotKeys(m.Keys)
			m.Keys = keys
		}
		if err == nil && (m.TTL <= 0 || m.TTL > n.cfg.MaxSlotTTL) {
			err = fmt.Errorf("ttl %v must be in (0, %v] (the leader's MaxSlotTTL)", m.TTL, n.cfg.MaxSlotTTL)
		}
		if err != nil {
			return wire.AcquireResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if !leading {
			return wire.AcquireResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		ctx, cancel := context.WithTimeout(ctx, min(max(m.MaxWait, 0), 5*time.Second)+time.Second)
		defer cancel()
		m.MaxWait = min(max(m.MaxWait, 0), 5*time.Second)
		full, err := n.leaderAcquire(ctx, m)
		if errors.Is(err, raftpace.ErrConcurrencyLimit) {
			return wire.AcquireResp{Code: wire.CodeConcurrency, Full: full, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		return wire.AcquireResp{Code: wire.CodeFor(err), Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodReleaseSlots:
		m, err := wire.DecodeReleaseReq(req)
		if err == nil {
			for _, id := range m.IDs {
				if err = fsm.ValidateID(id); err != nil {
					break
				}
			}
		}
		if err != nil {
			return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if !leading {
			return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		index, err := n.leaderRelease(m.IDs)
		return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodSync:
		if len(req) != 1 || req[0] != wire.Version {
			return wire.IndexResp{Code: wire.CodeInvalid, Msg: "sync: malformed request"}.Encode(), nil
		}
		if !leading {
			return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		index, err := n.leaderSyncIndex()
		return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodSetCap:
		m, err := wire.DecodeCapReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err != nil {
			return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if !leading {
			return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		index, err := n.applyCap(m.Key, m.Max)
		return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
	}
	return nil, fmt.Errorf("node: unknown rpc method %d", method)
}

// leaderSyncIndex returns an index covering every entry committed so far:
// raft's barrier makes sure the leader applied all of them first.
func (n *Node) leaderSyncIndex() (uint64, error) {
	if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
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
	err := n.untilDone(ctx, "sync", func() (err error) {
		index, err = n.indexOnLeader(ctx, "sync", wire.MethodSync, []byte{wire.Version}, n.leaderSyncIndex)
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
