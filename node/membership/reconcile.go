package membership

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
)

// reconcileLoop runs on the leader: it makes raft's configuration follow
// gossip. A live node missing from raft is added (as a voter while there are
// fewer than Voters, else as a nonvoter); a nonvoter is promoted when voters
// are missing. A node that leaves gracefully removes itself (Leave); a node
// that fails without leaving stays a member (it may come back).
func (m *Membership) reconcileLoop() {
	defer m.wg.Done()
	loop.Every(m.ctx, 500*time.Millisecond, m.gossip.kick, func() bool {
		if leaderKnown(m.d.Raft) {
			m.gossip.markBootstrapped()
		}
		m.rejoinFailed()
		if !m.d.Leading() {
			return true
		}
		if err := m.reconcile(); err != nil {
			m.log.Warn("reconcile membership", "err", err)
		}
		return true
	})
}

// rejoinFailed contacts, every few seconds, raft members that gossip
// reports failed: after a partition heals memberlist would otherwise only
// notice at its next full state sync (30s), and status would show healthy
// members as failed until then.
func (m *Membership) rejoinFailed() {
	if time.Since(m.lastRejoin) < 3*time.Second {
		return
	}
	m.lastRejoin = time.Now()
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	members := m.gossip.snapshot()
	var addrs []string
	for _, s := range f.Configuration().Servers {
		if g, ok := members[string(s.ID)]; ok && !g.Alive && g.Gossip != "" && string(s.ID) != m.cfg.NodeID {
			addrs = append(addrs, g.Gossip)
		}
	}
	if len(addrs) == 0 {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if count, err := m.gossip.ml.Join(addrs); count > 0 {
			m.log.Info("rejoined failed gossip members", "contacted", count)
		} else {
			m.log.Debug("rejoin failed gossip members", "addrs", addrs, "err", err)
		}
	}()
}

func (m *Membership) reconcile() error {
	f := m.d.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var errs []error
	servers, err := m.removeFailed(f.Configuration().Servers)
	if err != nil {
		errs = append(errs, err)
	}
	inRaft := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, s := range servers {
		inRaft[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	members := m.gossip.snapshot()
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := members[id]
		s, known := inRaft[id]
		switch {
		case g.Alive && g.Addr != "" && (!known || string(s.Address) != g.Addr) && !m.gossip.isDeparted(id):
			if !m.passesCheck(id, g.Addr) {
				continue
			}
			m.gossip.clearFailed(id)
			var err error
			// A new member joins as a nonvoter and is promoted once it has
			// caught up (below): adding an empty voter would make the quorum
			// wait for its catch-up.
			if known && s.Suffrage == raft.Voter {
				m.log.Info("updating voter address", "member", id, "addr", g.Addr)
				err = m.d.Raft.AddVoter(raft.ServerID(id), raft.ServerAddress(g.Addr), 0, raftChangeTimeout).Error()
			} else {
				m.log.Info("adding nonvoter", "member", id, "addr", g.Addr)
				err = m.d.Raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(g.Addr), 0, raftChangeTimeout).Error()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("add %s: %w", id, err))
			} else {
				m.addedAt[id] = time.Now()
			}
		}
	}
	// Promote healthy nonvoters while voters are missing: answering the
	// leader's renewals and caught up with its log.
	applied := m.d.Raft.AppliedIndex()
	for _, s := range servers {
		if voters >= m.cfg.Voters {
			break
		}
		if s.Suffrage != raft.Nonvoter || !m.d.Shares.CaughtUp(string(s.ID), m.cfg.ShareTTL, applied-min(applied, promoteLag)) {
			continue
		}
		m.log.Info("promoting nonvoter to voter", "member", s.ID)
		if err := m.d.Raft.AddVoter(s.ID, s.Address, 0, raftChangeTimeout).Error(); err != nil {
			errs = append(errs, fmt.Errorf("promote %s: %w", s.ID, err))
		} else {
			voters++
		}
	}
	errs = append(errs, m.syncMembers())
	return errors.Join(errs...)
}

// promoteLag is how many log entries a nonvoter may trail the leader's
// applied index and still be promoted.
const promoteLag = 256

// tlsCheck is the last failed TLS check of a member.
type tlsCheck struct {
	addr      string
	err       string
	retryAt   time.Time
	loggedAt  time.Time
	succeeded bool
}

// passesCheck reports whether the leader may add member id at addr to
// raft. Without TLS, always, unless the leader removed id as failed: then
// only once its address answers. With TLS gossip is not enough (a node that
// has the gossip key but no certificate of the cluster CA gossips like
// anyone else): the leader must first open a connection to addr, which
// succeeds only when both ends accept each other's certificate. A failure
// is logged (once per address and error, and at most every 30s) and
// retried after 5s.
func (m *Membership) passesCheck(id, addr string) bool {
	failed := m.gossip.isFailed(id)
	if !m.cfg.TLS && !failed {
		return true
	}
	if m.tlsChecks == nil {
		m.tlsChecks = make(map[string]tlsCheck)
	}
	prev, seen := m.tlsChecks[id]
	now := time.Now()
	if seen && prev.addr == addr && !prev.succeeded && now.Before(prev.retryAt) {
		return false
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	err := m.d.Probe(ctx, addr)
	cancel()
	if err == nil {
		if seen && !prev.succeeded {
			m.log.Info("member passed the connection check", "member", id, "addr", addr)
		}
		m.tlsChecks[id] = tlsCheck{addr: addr, succeeded: true}
		return true
	}
	c := tlsCheck{addr: addr, err: err.Error(), retryAt: now.Add(5 * time.Second), loggedAt: prev.loggedAt}
	if !seen || prev.addr != addr || prev.err != c.err || now.Sub(prev.loggedAt) >= 30*time.Second {
		why := "its address does not answer (it was removed as failed)"
		if m.cfg.TLS {
			why = "its address failed the TLS check (is its certificate signed by the cluster CA?)"
		}
		m.log.Warn("not adding member to raft: "+why, "member", id, "addr", addr, "err", err)
		c.loggedAt = now
	}
	m.tlsChecks[id] = c
	return false
}

// syncMembers adds every server of raft's configuration to the replicated
// member list (and follows address changes).
func (m *Membership) syncMembers() error {
	m.d.MemberWrites.Lock()
	defer m.d.MemberWrites.Unlock()
	f := m.d.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	want := make(map[string]string)
	for _, s := range f.Configuration().Servers {
		want[string(s.ID)] = string(s.Address)
	}
	have := make(map[string]fsm.Member)
	for _, fm := range m.d.Members() {
		have[fm.ID] = fm
	}
	var errs []error
	for id, addr := range want {
		fm, ok := have[id]
		if ok && fm.Addr == addr {
			continue
		}
		// A new member starts with fraction 0: balanceFractions grows it
		// once every member has applied the shrinks that make room.
		if _, err := m.d.Commit(&fsm.UpsertMember{Member: fsm.Member{ID: id, Addr: addr, Fraction: fm.Fraction}}); err != nil {
			errs = append(errs, fmt.Errorf("record member %s: %w", id, err))
		}
	}
	// A member gone from raft stays in the list, its fraction reserved for
	// it, until reclaim releases and forgets it (churn.go).
	return errors.Join(errs...)
}
