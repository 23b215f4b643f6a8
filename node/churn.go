package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// Membership churn (DESIGN 9) is package node/membership's: the leader's
// side of a departure, reclaim and the removal of failed servers. What
// stays here is the leaving member's side, which is the node's own life:
// it stops admitting, gives up its fallback, hands its pacer's leadership
// over, and closes.

// leaveTimeout bounds Leave when the caller's context has no deadline.
const leaveTimeout = 15 * time.Second

// Leave removes this node from the cluster and closes it: it stops
// admitting at once (Reserve returns ErrClosed), hands its fallback
// fraction back to the leader, hands leadership over if it leads (the
// successor continues each key at this leader's exact cursor: no pause in
// grants), leaves raft's configuration and gossip, and closes. Use it when
// the process will not come back under the same id and data dir (a
// Kubernetes Deployment, an autoscaled worker); use Close for a member with
// a stable identity and a persistent data dir that will restart (a
// StatefulSet). It refuses to remove the cluster's only voter.
//
// If no leader takes the departure before ctx ends (15s without a
// deadline), Leave returns the error and the node stays a member and
// admits again; the caller may then Close it (the others see a failure).
func (n *Node) Leave(ctx context.Context) error {
	if n.closed() {
		return raftpace.ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaveTimeout)
		defer cancel()
	}
	if n.gossip.SoleVoter() {
		return fmt.Errorf("node: leave: %w: %s; stop it instead (its state stays in the data dir)", ErrLastVoter, n.cfg.NodeID)
	}
	if !n.departing.CompareAndSwap(false, true) {
		return fmt.Errorf("node: leave: %w: already leaving", raftpace.ErrInvalidRequest)
	}
	begin := time.Now()
	busy := n.fallback.Depart()
	n.log.Info("leaving the cluster: admitting nothing more", "fallback_busy", busy)
	if n.leading() {
		n.handOver()
	}
	// Announce the departure in gossip before raft: a leader elected while
	// this node is still alive in gossip but outside raft would add it back.
	n.gossip.LeaveGossip()
	req := wire.RemoveServerReq{ID: n.cfg.NodeID, Busy: busy}
	err := n.lc.UntilDone(ctx, "leave", func() error {
		// The busy time runs from now, not from when depart measured it:
		// sending it later only makes the leader wait longer.
		_, err := n.lc.IndexOnLeader(ctx, "leave", wire.MethodRemoveServer, req.Encode(),
			func() (uint64, error) { return n.departed(req) })
		return err
	})
	if err != nil && strings.Contains(err.Error(), "need at least one voter") {
		// The others left meanwhile (a whole cluster stopping at once).
		err = fmt.Errorf("node: leave: %w: %s (the others left first); stop it instead (its state stays in the data dir)", ErrLastVoter, n.cfg.NodeID)
	}
	if err != nil {
		n.departing.Store(false)
		n.fallback.Undepart()
		n.gossip.RejoinGossip()
		if !errors.Is(err, ErrLastVoter) {
			n.log.Error("leave failed: still a member, admitting again", "err", err)
		}
		return err
	}
	n.log.Info("left the cluster", "took", time.Since(begin).Round(time.Millisecond))
	return n.Close()
}

// departed takes a member's departure on the leader (membership's
// Departed). The transport serves RPCs before start has built membership;
// a node that new is not the leader, and says so rather than crash.
func (n *Node) departed(req wire.RemoveServerReq) (uint64, error) {
	if n.gossip == nil {
		return 0, wire.ErrNotLeader
	}
	return n.gossip.Departed(req)
}

// handOver gives leadership away without a pause in grants: the pacer stops
// granting, every key's exact cursor is committed as its horizon (the
// fsm adapter overwrites horizons, so the successor starts there, not up to
// HorizonAhead later), then raft transfers leadership. If the transfer
// fails this node leads on.
func (n *Node) handOver() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	others := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			others++
		}
	}
	if others == 0 {
		return
	}
	begin := time.Now()
	gen := n.pacer.StepDown()
	n.shares.StepDown()
	n.horizonWrites.Lock() // waits out an extension collected before StepDown
	for _, ext := range n.pacer.Cursors() {
		if _, err := n.commit(&ext, commitTimeout); err != nil {
			// The horizons committed before still cover every grant; the
			// successor just starts later.
			n.log.Warn("hand-over: committing the cursors failed; the successor starts at the horizons", "err", err)
			break
		}
	}
	n.horizonWrites.Unlock()
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		n.log.Warn("hand-over: leadership transfer failed; leading on", "err", err)
		n.becomeLeader(gen)
		return
	}
	_, to := n.raft.LeaderWithID()
	n.log.Info("handed leadership over at the exact cursors", "to", to, "took", time.Since(begin).Round(time.Millisecond))
}

// unfence lifts the witness's fence on a member whose share this leader
// just renewed (it reported itself fenced): from now on its fallback
// follows the share rules again.
func (n *Node) unfence(id string) {
	if n.pg == nil {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ShareTTL/3)
		defer cancel()
		if err := n.pg.Unfence(ctx, id); err != nil {
			n.log.Debug("unfence", "member", id, "err", err)
			return
		}
		n.log.Info("lifted the fence on a member that answers again", "member", id)
	}()
}
