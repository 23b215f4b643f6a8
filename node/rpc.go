package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
	"github.com/raftpace/raftpace/transport"
)

// rpcHandler serves one RPC method: the request's bytes in, the answer's
// out. An error (rather than an answer carrying a code) closes the call:
// the caller treats it as a failed call.
type rpcHandler func(ctx context.Context, req []byte) ([]byte, error)

// handlers is the one table of the RPC methods this node serves (the
// methods themselves are listed in package wire).
func (n *Node) handlers() map[uint8]rpcHandler {
	leading := func() bool { return n.raft.State() == raft.Leader }
	return map[uint8]rpcHandler{
		// A grant may wait on the leader (for a horizon commit, for its
		// share to reach its slot, for its turn): it parks, so that a
		// member waiting on thousands of keys does not stop the
		// connection its other calls share (transport.Park).
		wire.MethodReserve: func(ctx context.Context, req []byte) ([]byte, error) {
			transport.Park(ctx)
			return n.pacer.ServeReserve(ctx, n.ctx.Done(), req, n.PausedFor), nil
		},
		wire.MethodLease: func(ctx context.Context, req []byte) ([]byte, error) {
			transport.Park(ctx)
			return n.pacer.ServeLease(ctx, n.ctx.Done(), req, n.PausedFor), nil
		},
		wire.MethodLeases: func(ctx context.Context, req []byte) ([]byte, error) {
			transport.Park(ctx)
			return n.batchServer.Serve(ctx, req), nil
		},
		wire.MethodRemaining: func(_ context.Context, req []byte) ([]byte, error) {
			return n.pacer.ServeRemaining(req), nil
		},
		wire.MethodShare:        n.serveShare,
		wire.MethodSetLimit:     n.serveSetLimit,
		wire.MethodRemoveServer: n.serveRemoveServer,
		wire.MethodSync:         n.serveSync,
		wire.MethodPause: func(_ context.Context, req []byte) ([]byte, error) {
			return n.gate.Serve(leading(), req), nil
		},
		wire.MethodAcquireSlots: func(ctx context.Context, req []byte) ([]byte, error) {
			transport.Park(ctx) // waits for a free slot, as a grant does
			return n.slots.ServeAcquire(ctx, leading(), req), nil
		},
		wire.MethodReleaseSlots: func(_ context.Context, req []byte) ([]byte, error) {
			return n.slots.ServeRelease(leading(), req), nil
		},
		wire.MethodSetCap: func(_ context.Context, req []byte) ([]byte, error) {
			return n.slots.ServeSetCap(leading(), req), nil
		},
	}
}

// handleRPC serves the transport's RPCs from other nodes.
func (n *Node) handleRPC(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	h, ok := n.rpc[method]
	if !ok {
		n.log.Warn("unknown rpc method", "method", method)
		return nil, fmt.Errorf("node: unknown rpc method %d", method)
	}
	return h(ctx, req)
}

func (n *Node) serveShare(_ context.Context, req []byte) ([]byte, error) {
	m, err := wire.DecodeShareReq(req)
	if err != nil {
		return nil, err
	}
	// Only the leader this node knows may hold its share.
	if _, id := n.raft.LeaderWithID(); string(id) != m.Leader {
		return nil, fmt.Errorf("node: share renewal from %q, but the leader here is %q", m.Leader, id)
	}
	return n.fallback.Renew().Encode(), nil
}

func (n *Node) serveSetLimit(_ context.Context, req []byte) ([]byte, error) {
	m, err := wire.DecodeSetLimitReq(req)
	if err == nil {
		err = fsm.ValidateKey(m.Key)
	}
	if err == nil {
		err = m.Limit.Validate()
	}
	if err != nil {
		return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
	}
	if n.raft.State() != raft.Leader {
		return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
	}
	index, err := n.applyLimit(m.Key, m.Limit)
	return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
}

func (n *Node) serveRemoveServer(_ context.Context, req []byte) ([]byte, error) {
	m, err := wire.DecodeRemoveServerReq(req)
	if err != nil {
		return wire.IndexResp{Code: wire.CodeInvalid, Msg: err.Error()}.Encode(), nil
	}
	index, err := n.departed(m)
	return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
}

// serveSync answers with an index covering every entry committed so far.
func (n *Node) serveSync(_ context.Context, req []byte) ([]byte, error) {
	if len(req) != 1 || req[0] != wire.Version {
		return wire.IndexResp{Code: wire.CodeInvalid, Msg: "sync: malformed request"}.Encode(), nil
	}
	if n.raft.State() != raft.Leader {
		return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
	}
	index, err := n.leaderSyncIndex()
	return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
}
