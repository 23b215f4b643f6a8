package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
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
//     cursors if it leads, and leaves raft and gossip. The member's side is
//     node's (*Node).Leave; the leader's side is Departed.
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

// Departed takes a member's departure on the leader: its fraction counts
// from now plus its busy time, and it leaves raft. reclaim forgets it once
// the busy time has passed.
func (m *Membership) Departed(req wire.RemoveServerReq) (uint64, error) {
	if m.d.Raft.State() != raft.Leader || !m.d.Leading() {
		// Not leading yet (a leader just handed over to this node): the
		// release must not be lost, so the member asks again.
		return 0, wire.ErrNotLeader
	}
	if req.ID == m.cfg.NodeID {
		return m.departSelf(req.Busy)
	}
	m.d.Shares.Release(req.ID, m.d.Now()+int64(req.Busy))
	m.log.Info("member leaving: its fraction comes back", "member", req.ID, "in", req.Busy)
	return m.removeServer(req.ID, true)
}

// departSelf takes this leader's own departure (its hand-over failed).
// A release is leader-local state and would die with this leadership,
// leaving the successor to reap the fraction, so the departure is
// committed as a fact instead: once its busy time has passed the member is
// forgotten, then it leaves raft (raft lets a leader remove itself; it
// steps down after).
func (m *Membership) departSelf(busy time.Duration) (uint64, error) {
	if busy > 0 {
		select {
		case <-time.After(busy):
		case <-m.ctx.Done():
			return 0, raftpace.ErrClosed
		}
	}
	// Held until it is out of raft too: syncMembers would otherwise add it
	// back to the list, a ghost for the successor to reap.
	m.d.MemberWrites.Lock()
	defer m.d.MemberWrites.Unlock()
	if _, err := m.d.Commit(&fsm.RemoveMember{ID: m.cfg.NodeID}); err != nil {
		return 0, err
	}
	m.log.Info("leaving while leading: forgotten, its fraction is shared out", "member", m.cfg.NodeID)
	return m.removeServer(m.cfg.NodeID, true)
}

// removeServer removes id from raft; it runs on the leader. left: id
// asked to leave, and a tombstone keeps reconcile from adding it back
// while gossip still calls it alive. Otherwise it was given up (fenced or
// reaped) and is added back, as after removeFailed, once gossip calls it
// alive and its address answers: it may only have been paused. With the
// tombstone there too, a follower stopped 5 s (SIGSTOP) and continued was
// forgotten and never added back (its gossip incarnation never changed, and
// only a new one lifts a tombstone): it admitted nothing for the 31 s
// until the run ended.
func (m *Membership) removeServer(id string, left bool) (uint64, error) {
	if err := fsm.ValidateID(id); err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	if m.d.Raft.State() != raft.Leader {
		return 0, wire.ErrNotLeader
	}
	if left {
		m.gossip.markDeparted(id)
	} else {
		m.gossip.markFailed(id)
	}
	f := m.d.Raft.RemoveServer(raft.ServerID(id), 0, raftChangeTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, wire.ErrNotLeader
		}
		return 0, fmt.Errorf("node: remove %s: %w", id, err)
	}
	return f.Index(), nil
}

// reclaimLoop runs on every node; while it leads it takes back fractions
// and forgets released members (reclaim).
func (m *Membership) reclaimLoop() {
	defer m.wg.Done()
	lastTry := make(map[string]time.Time)
	loop.Every(m.ctx, 250*time.Millisecond, nil, func() bool {
		if !m.d.Leading() {
			return true
		}
		m.reclaim(lastTry)
		return true
	})
}

// reclaim takes back the fraction of every member that will not spend it,
// by the strongest rule available:
//
//   - with the witness, a member whose share has lapsed, silent for
//     ShareTTL, is fenced through
//     Postgres once Postgres has not heard from it for fenceStale (a member
//     it hears from is alive: cut off, pooling or pacing under its licence,
//     and keeps its fraction); the fraction counts from the fence's answer
//     plus its Wait (licence and pool grants over) plus UseGrace;
//   - without, a member silent for ReapAfter has stopped admitting;
//   - Unsafe.ReclaimWithoutFence: silent for ShareTTL + 1s, nothing checked.
//
// Then every released member whose time has come is forgotten.
func (m *Membership) reclaim(lastTry map[string]time.Time) {
	self := m.cfg.NodeID
	switch {
	case m.cfg.UnsafeReclaim:
		for _, id := range m.d.Shares.Overdue(self, m.cfg.ShareTTL+time.Second) {
			m.log.Warn("UNSAFE: taking back a silent member's fraction without fencing it", "member", id)
			m.d.Shares.Release(id, m.d.Now())
		}
	case m.d.Fence != nil:
		// Silent for ShareTTL, not just past its hold: a member added a
		// moment ago has no hold yet and may not have reached Postgres
		// either (its first heartbeat goes out once its link is open), so
		// the witness would say "never seen" and fence a live member. A
		// member that answered renewals is past its hold only once ShareTTL
		// has passed since its last answer anyway.
		for _, id := range m.d.Shares.Overdue(self, m.cfg.ShareTTL) {
			if time.Since(lastTry[id]) < m.cfg.WitnessTTL/3 {
				continue
			}
			lastTry[id] = time.Now()
			m.fence(id)
		}
	default:
		for _, id := range m.d.Shares.Overdue(self, m.cfg.ReapAfter) {
			m.log.Warn("reaping member not heard from: its fraction comes back", "member", id, "reap_after", m.cfg.ReapAfter)
			m.d.Shares.Release(id, m.d.Now())
		}
	}
	for id, at := range lastTry {
		if time.Since(at) > time.Minute {
			delete(lastTry, id)
		}
	}
	m.forgetReleased()
}

// fence fences member id through the witness and, if Postgres agrees it
// is silent, releases its fraction from the answer's arrival plus the
// answer's Wait and UseGrace.
func (m *Membership) fence(id string) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.WitnessTTL/3)
	defer cancel()
	res, err := m.d.Fence(ctx, id)
	if err != nil {
		m.log.Debug("fence: postgres did not answer; the member keeps its fraction", "member", id, "err", err)
		return
	}
	if !res.Fenced {
		m.log.Debug("fence: postgres hears from the member; it keeps its fraction", "member", id, "reason", res.Reason)
		return
	}
	in := res.Wait + m.cfg.UseGrace
	m.d.Shares.Release(id, m.d.Now()+int64(in))
	m.log.Warn("member silent to the leader and to postgres: fenced; its fraction comes back",
		"member", id, "last_heartbeat", res.LastSeen.Round(time.Millisecond), "in", in.Round(time.Millisecond))
}

// forgetReleased removes released members whose release time has passed:
// from raft's configuration first (if still there), then from the member
// list, which returns their fraction to the others (balanceFractions).
func (m *Membership) forgetReleased() {
	ids := m.d.Shares.Released(m.d.Now())
	if len(ids) == 0 {
		return
	}
	m.d.MemberWrites.Lock()
	defer m.d.MemberWrites.Unlock()
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	inRaft := make(map[string]bool)
	for _, s := range f.Configuration().Servers {
		inRaft[string(s.ID)] = true
	}
	for _, id := range ids {
		if id == m.cfg.NodeID {
			continue
		}
		if !m.d.Shares.IsReleased(id) {
			continue // rejoined meanwhile (a new incarnation)
		}
		if inRaft[id] {
			// Out of raft and forgotten in one round: were it forgotten
			// at the next, reconcile could add it back in between (it
			// answers, if it was only paused) and it would be removed
			// again as released.
			if _, err := m.removeServer(id, false); err != nil {
				m.log.Warn("removing a released member from raft", "member", id, "err", err)
				continue
			}
		}
		if _, err := m.d.Commit(&fsm.RemoveMember{ID: id}); err != nil {
			m.log.Warn("forgetting a released member", "member", id, "err", err)
			continue
		}
		m.log.Info("member forgotten: its fraction is shared out", "member", id)
	}
}

// removeFailed removes from raft every member that has left the leader's
// renewals unanswered for FailedServerAfter, while the quorum holds; it
// returns the servers left. Voters removed this way are replaced by
// healthy nonvoters (reconcile's promotion). The member's fraction is not
// touched: it stays reserved until reclaim releases it. A removed member
// that is alive is added again once it answers a probe.
//
// A member reconcile added within the last FailedServerAfter is not failed
// yet, however long it was silent before: a member that comes back after
// it was removed has not answered a renewal when it is added again, and
// removing it at the next reconcile (every 500ms), before a renewal could
// reach it, kept it out for good (a restarted member was added and removed
// every 500ms for 13 s in a chaos run).
func (m *Membership) removeFailed(servers []raft.Server) ([]raft.Server, error) {
	now := time.Now()
	for id, at := range m.addedAt {
		if now.Sub(at) >= m.cfg.FailedServerAfter {
			delete(m.addedAt, id)
		}
	}
	var failed []raft.Server
	voters, healthyVoters := 0, 0
	for _, s := range servers {
		id := string(s.ID)
		silent, lapsed := m.d.Shares.Silence(id)
		_, justAdded := m.addedAt[id]
		dead := id != m.cfg.NodeID && lapsed && silent >= m.cfg.FailedServerAfter && !justAdded
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
		silent, _ := m.d.Shares.Silence(string(s.ID))
		m.log.Warn("removing a failed member from raft (its fraction stays reserved until reclaimed)",
			"member", s.ID, "suffrage", s.Suffrage.String(), "silent", silent.Round(time.Millisecond))
		m.gossip.markFailed(string(s.ID))
		if err := m.d.Raft.RemoveServer(s.ID, 0, raftChangeTimeout).Error(); err != nil {
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
