package node

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/leadercall"
	"github.com/raftpace/raftpace/node/wire"
)

// The node's one path to the leader lives in package node/leadercall (its
// doc says what it promises). Here is the node's side of it: what the
// caller is given, and how the code of a leader's answer to a grant
// becomes this node's error.

// Which failures are retried, and the backoff, are package wire's
// (retry.go). commitTimeout bounds one raft commit on the leader.
const commitTimeout = 5 * time.Second

// newLeaderCall builds the node's path to its leader.
func (n *Node) newLeaderCall() *leadercall.Caller {
	return leadercall.New(leadercall.Deps{
		Leader: func() string {
			addr, _ := n.raft.LeaderWithID()
			return string(addr)
		},
		Self:    n.Addr,
		Leading: n.leading,
		// n.trans is made after the rooms that are given this caller.
		Call: func(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error) {
			return n.trans.Call(ctx, addr, method, req)
		},
		WaitApplied: n.waitApplied,
		Forwarded:   &n.stats.forwarded,
		Ctx:         n.ctx,
	})
}

// leading reports whether raft says this node is the leader now.
func (n *Node) leading() bool { return n.raft.State() == raft.Leader }

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

// commitNow commits c within commitTimeout: the commit the rooms are given.
func (n *Node) commitNow(c fsm.Command) (uint64, error) { return n.commit(c, commitTimeout) }
