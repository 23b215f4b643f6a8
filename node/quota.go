package node

import (
	"context"
	"fmt"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// Remaining reads what key's limit has left (its rate's tokens, its
// quota's count) on the leader, where it is exact: one round trip from a
// follower. Without a leader it fails with ErrNoLeader when ctx ends: a
// follower's copy of the committed count bounds nothing the leader granted
// since.
func (n *Node) Remaining(ctx context.Context, key string) (r raftpace.Remaining, err error) {
	req, what := wire.RemainingReq{Key: key}.Encode(), "remaining "+key
	err = n.untilDone(ctx, what, func() (err error) {
		raw := n.pacer.ServeRemaining(req) // "not leader" unless it leads
		if !n.leading() {
			if raw, err = n.callLeader(ctx, what, wire.MethodRemaining, req); err != nil {
				return err
			}
		}
		resp, err := wire.DecodeRemainingResp(raw, key)
		if err != nil {
			return fmt.Errorf("%w: %w", wire.ErrRetry, err)
		}
		r = resp.Remaining
		return leaderErr(what, resp.Code, resp.Msg)
	})
	return r, err
}
