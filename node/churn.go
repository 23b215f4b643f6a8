package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// Membership churn (DESIGN 9). Workers come and go every day: a deploy
// replaces each with a new id and an empty data dir, an autoscaler stops
// some with SIGTERM, the kernel kills others. This file is how the cluster
// keeps its rate through that:
//
//   - Leave: a member told to stop stops spending, hands its fraction back
//     (the leader counts it from the request's arrival plus whatever its own
//     fallback slots still reach), hands leadership over at its exact
//     cursors if it leads, and leaves raft and gossip.
//   - reclaim (leader): the fraction of a member that will not spend it
//     comes back — fenced through the witness when Postgres is configured,
//     else reaped after ReapAfter (it has stopped by then) — and a released
//     member is forgotten (removed from the replicated member list).
//   - removeFailed (leader, from reconcile): a member that stopped answering
//     renewals for FailedServerAfter leaves the raft configuration while the
//     quorum holds, so healthy nonvoters can take dead voters' places and no
//     sequence of one-at-a-time replacements strands the cluster.
//
// Removal from raft and the return of a fraction are separate on purpose:
// quorum health cannot wait, the fraction must (node/DESIGN.md).

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
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		voters := 0
		self := false
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
				self = self || string(s.ID) == n.cfg.NodeID
			}
		}
		if self && voters == 1 {
			return fmt.Errorf("node: leave: %w: %s; stop it instead (its state stays in the data dir)", ErrLastVoter, n.cfg.NodeID)
		}
	}
	if !n.departing.CompareAndSwap(false, true) {
		return fmt.Errorf("node: leave: %w: already leaving", raftpace.ErrInvalidRequest)
	}
	begin := time.Now()
	busy := n.fallback.depart()
	n.log.Info("leaving the cluster: admitting nothing more", "fallback_busy", busy)
	if n.leading() {
		n.handOver()
	}
	// Announce the departure in gossip before raft: a leader elected while
	// this node is still alive in gossip but outside raft would add it back.
	if err := n.gossip.ml.Leave(2 * time.Second); err != nil {
		n.log.Warn("gossip leave", "err", err)
	}
	req := wire.RemoveServerReq{ID: n.cfg.NodeID, Busy: busy}
	err := n.untilDone(ctx, "leave", func() error {
		// The busy time runs from now, not from when depart measured it:
		// sending it later only makes the leader wait longer.
		_, err := n.indexOnLeader(ctx, "leave", wire.MethodRemoveServer, req.Encode(),
			func() (uint64, error) { return n.departed(req) })
		return err
	})
	if err != nil && strings.Contains(err.Error(), "need at least one voter") {
		// The others left meanwhile (a whole cluster stopping at once).
		err = fmt.Errorf("node: leave: %w: %s (the others left first); stop it instead (its state stays in the data dir)", ErrLastVoter, n.cfg.NodeID)
	}
	if err != nil {
		n.departing.Store(false)
		n.fallback.undepart()
		if _, jerr := n.gossip.ml.Join(n.gossipPeers()); jerr != nil {
			n.log.Warn("rejoining gossip after a failed leave", "err", jerr)
		}
		if !errors.Is(err, ErrLastVoter) {
			n.log.Error("leave failed: still a member, admitting again", "err", err)
		}
		return err
	}
	n.log.Info("left the cluster", "took", time.Since(begin).Round(time.Millisecond))
	return n.Close()
}

// departed takes a member's departure on the leader: its fraction counts
// from now plus its busy time, and it leaves raft. reclaim forgets it once
// the busy time has passed.
func (n *Node) departed(req wire.RemoveServerReq) (uint64, error) {
	if n.raft.State() != raft.Leader || !n.pacer.IsLeading() {
		// Not leading yet (a leader just handed over to this node): the
		// release must not be lost, so the member asks again.
		return 0, wire.ErrNotLeader
	}
	if req.ID == n.cfg.NodeID {
		return n.departSelf(req.Busy)
	}
	n.shares.Release(req.ID, n.now()+int64(req.Busy))
	n.log.Info("member leaving: its fraction comes back", "member", req.ID, "in", req.Busy)
	return n.removeServer(req.ID)
}

// departSelf takes this leader's own departure (its hand-over failed).
// A release is leader-local state and would die with this leadership,
// leaving the successor to reap the fraction, so the departure is
// committed as a fact instead: once its busy time has passed the member is
// forgotten, then it leaves raft (raft lets a leader remove itself; it
// steps down after).
func (n *Node) departSelf(busy time.Duration) (uint64, error) {
	if busy > 0 {
		select {
		case <-time.After(busy):
		case <-n.ctx.Done():
			return 0, raftpace.ErrClosed
		}
	}
	// Held until it is out of raft too: syncMembers would otherwise add it
	// back to the list, a ghost for the successor to reap.
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	if _, err := n.commit(&fsm.RemoveMember{ID: n.cfg.NodeID}, 5*time.Second); err != nil {
		return 0, err
	}
	n.log.Info("leaving while leading: forgotten, its fraction is shared out", "member", n.cfg.NodeID)
	return n.removeServer(n.cfg.NodeID)
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
	for _, ext := range n.pacer.Cursors() {
		if _, err := n.commit(&ext, 5*time.Second); err != nil {
			// The horizons committed before still cover every grant; the
			// successor just starts later.
			n.log.Warn("hand-over: committing the cursors failed; the successor starts at the horizons", "err", err)
			break
		}
	}
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		n.log.Warn("hand-over: leadership transfer failed; leading on", "err", err)
		n.becomeLeader(gen)
		return
	}
	_, to := n.raft.LeaderWithID()
	n.log.Info("handed leadership over at the exact cursors", "to", to, "took", time.Since(begin).Round(time.Millisecond))
}

// reclaimLoop runs on every node; while it leads it takes back fractions
// and forgets released members (reclaim).
func (n *Node) reclaimLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastTry := make(map[string]time.Time)
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if !n.pacer.IsLeading() {
			continue
		}
		n.reclaim(lastTry)
	}
}

// reclaim takes back the fraction of every member that will not spend it,
// by the strongest rule available:
//
//   - with the witness, a member whose share has lapsed is fenced through
//     Postgres once Postgres has not heard from it for fenceStale (a member
//     it hears from is alive: cut off, pooling or pacing under its licence,
//     and keeps its fraction); the fraction counts from the fence's answer
//     plus its Wait (licence and pool grants over) plus UseGrace;
//   - without, a member silent for ReapAfter has stopped admitting;
//   - Unsafe.ReclaimWithoutFence: silent for ShareTTL + 1s, nothing checked.
//
// Then every released member whose time has come is forgotten.
func (n *Node) reclaim(lastTry map[string]time.Time) {
	self := n.cfg.NodeID
	switch {
	case n.cfg.Unsafe.ReclaimWithoutFence:
		for _, id := range n.shares.Overdue(self, n.cfg.ShareTTL+time.Second) {
			n.log.Warn("UNSAFE: taking back a silent member's fraction without fencing it", "member", id)
			n.shares.Release(id, n.now())
		}
	case n.cfg.witnessed():
		for _, id := range n.shares.Overdue(self, 0) {
			if time.Since(lastTry[id]) < n.cfg.WitnessTTL/3 {
				continue
			}
			lastTry[id] = time.Now()
			n.fence(id)
		}
	default:
		for _, id := range n.shares.Overdue(self, n.cfg.reapAfter()) {
			n.log.Warn("reaping member not heard from: its fraction comes back", "member", id, "reap_after", n.cfg.reapAfter())
			n.shares.Release(id, n.now())
		}
	}
	for id, at := range lastTry {
		if time.Since(at) > time.Minute {
			delete(lastTry, id)
		}
	}
	n.forgetReleased()
}

// fence fences member id through the witness and, if Postgres agrees it
// is silent, releases its fraction from the answer's arrival plus the
// answer's Wait and UseGrace.
func (n *Node) fence(id string) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.WitnessTTL/3)
	defer cancel()
	res, err := n.pg.fence(ctx, id, n.cfg.fenceStale(), n.cfg.WitnessTTL)
	if err != nil {
		n.log.Debug("fence: postgres did not answer; the member keeps its fraction", "member", id, "err", err)
		return
	}
	if !res.Fenced {
		n.log.Debug("fence: postgres hears from the member; it keeps its fraction", "member", id, "reason", res.Reason)
		return
	}
	in := res.Wait + n.cfg.UseGrace
	n.shares.Release(id, n.now()+int64(in))
	n.log.Warn("member silent to the leader and to postgres: fenced; its fraction comes back",
		"member", id, "last_heartbeat", res.LastSeen.Round(time.Millisecond), "in", in.Round(time.Millisecond))
}

// forgetReleased removes released members whose release time has passed:
// from raft's configuration first (if still there), then from the member
// list, which returns their fraction to the others (balanceFractions).
func (n *Node) forgetReleased() {
	ids := n.shares.Released(n.now())
	if len(ids) == 0 {
		return
	}
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	inRaft := make(map[string]bool)
	for _, s := range f.Configuration().Servers {
		inRaft[string(s.ID)] = true
	}
	for _, id := range ids {
		if id == n.cfg.NodeID {
			continue
		}
		if !n.shares.IsReleased(id) {
			continue // rejoined meanwhile (a new incarnation)
		}
		if inRaft[id] {
			if _, err := n.removeServer(id); err != nil {
				n.log.Warn("removing a released member from raft", "member", id, "err", err)
			}
			continue // forgotten at the next round
		}
		if _, err := n.commit(&fsm.RemoveMember{ID: id}, 5*time.Second); err != nil {
			n.log.Warn("forgetting a released member", "member", id, "err", err)
			continue
		}
		n.log.Info("member forgotten: its fraction is shared out", "member", id)
	}
}

// removeFailed removes from raft every member that has left the leader's
// renewals unanswered for FailedServerAfter, while the quorum holds; it
// returns the servers left. Voters removed this way are replaced by
// healthy nonvoters (reconcile's promotion). The member's fraction is not
// touched: it stays reserved until reclaim releases it. A removed member
// that is alive is added again once it answers a probe.
func (n *Node) removeFailed(servers []raft.Server) ([]raft.Server, error) {
	var failed []raft.Server
	voters, healthyVoters := 0, 0
	for _, s := range servers {
		id := string(s.ID)
		silent, lapsed := n.shares.Silence(id)
		dead := id != n.cfg.NodeID && lapsed && silent >= n.cfg.FailedServerAfter
		if s.Suffrage == raft.Voter {
			voters++
			if !dead {
				healthyVoters++
			}
		}
		if dead {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		return servers, nil
	}
	if healthyVoters < voters/2+1 {
		// No quorum without them: no configuration change can commit.
		return servers, fmt.Errorf("%d of %d voters failed: no quorum to remove them", voters-healthyVoters, voters)
	}
	var errs []error
	gone := make(map[raft.ServerID]bool)
	for _, s := range failed {
		silent, _ := n.shares.Silence(string(s.ID))
		n.log.Warn("removing a failed member from raft (its fraction stays reserved until reclaimed)",
			"member", s.ID, "suffrage", s.Suffrage.String(), "silent", silent.Round(time.Millisecond))
		n.gossip.markFailed(string(s.ID))
		if err := n.raft.RemoveServer(s.ID, 0, 5*time.Second).Error(); err != nil {
			errs = append(errs, fmt.Errorf("remove failed %s: %w", s.ID, err))
			continue
		}
		gone[s.ID] = true
	}
	var left []raft.Server
	for _, s := range servers {
		if !gone[s.ID] {
			left = append(left, s)
		}
	}
	return left, errors.Join(errs...)
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
		if err := n.pg.unfence(ctx, id); err != nil {
			n.log.Debug("unfence", "member", id, "err", err)
			return
		}
		n.log.Info("lifted the fence on a member that answers again", "member", id)
	}()
}

// gossipPeers lists the gossip addresses of the other members gossip knows.
func (n *Node) gossipPeers() []string {
	var out []string
	for id, m := range n.gossip.snapshot() {
		if id != n.cfg.NodeID && m.gossip != "" {
			out = append(out, m.gossip)
		}
	}
	return out
}
