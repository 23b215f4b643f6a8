package membership

import (
	"fmt"
	"sort"
	"time"

	"github.com/raftpace/raftpace/internal/loop"
)

// leaderlessLoop logs, while the node knows no leader, what it waits for:
// Config.NoLeaderNotice after it started (or last knew one), then every six
// times as long. A node given no --join and no Postgres waited silently
// before this for someone to contact it: the seed of a new cluster does so
// by design, and so does a member restarted on other ports than the ones
// its leader knew, which never hears from it.
func (m *Membership) leaderlessLoop() {
	defer m.wg.Done()
	notice := m.cfg.NoLeaderNotice
	if notice <= 0 {
		return
	}
	since, logged := time.Now(), time.Time{}
	loop.Every(m.ctx, notice/4, nil, func() bool {
		now := time.Now()
		switch {
		case leaderKnown(m.d.Raft):
			since, logged = now, time.Time{}
		case now.Sub(since) >= notice && now.Sub(logged) >= 6*notice:
			m.log.Warn("no leader known; "+m.waitingFor(), "for", now.Sub(since).Round(time.Second), "gossip", m.GossipAddr())
			logged = now
		}
		return true
	})
}

// waitingFor says, for an operator, what this node needs to find or
// form a cluster.
func (m *Membership) waitingFor() string {
	alive := 0
	for id, g := range m.gossip.snapshot() {
		if g.Alive && id != m.cfg.NodeID {
			alive++
		}
	}
	others := m.raftPeers()
	switch {
	case alive == 0 && len(m.cfg.Join) == 0 && m.d.DiscoverJoin == nil:
		s := "this node has no --join addresses and no Postgres to find the cluster by: it waits to be contacted at its gossip address (raftpace join, another node's --join"
		if len(others) > 0 {
			s += fmt.Sprintf(", or the leader of the cluster it was in with %v, which looks for it only at the gossip address it had", others)
		}
		return s + "); restart it with --join host:gossip-port of a member to look for the cluster itself"
	case alive == 0 && len(m.cfg.Join) > 0:
		return fmt.Sprintf("no member answers at the --join addresses %v", m.cfg.Join)
	case alive == 0:
		return "no member found through the addresses members publish in Postgres (see this node's postgres lines if it cannot reach it), and none has contacted this node"
	case m.cfg.BootstrapExpect > 1 && m.d.Raft.LastIndex() == 0:
		return fmt.Sprintf("%d other members in gossip; a new cluster forms when %d nodes started with --bootstrap-expect %d see each other, or this node is added by a cluster's leader", alive, m.cfg.BootstrapExpect, m.cfg.BootstrapExpect)
	case len(others) == 0:
		return fmt.Sprintf("%d other members in gossip, none of them a leader that has added this node: is a cluster formed (one node started with --bootstrap-expect 1, or several with the same --bootstrap-expect)?", alive)
	default:
		return fmt.Sprintf("%d other members in gossip; raft has no quorum of %v (an election needs a majority of the voters to answer)", alive, append(others, m.cfg.NodeID))
	}
}

// raftPeers is the ids of the other servers in the raft configuration
// this node holds (none on a node never added to a cluster).
func (m *Membership) raftPeers() []string {
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != m.cfg.NodeID {
			ids = append(ids, string(s.ID))
		}
	}
	sort.Strings(ids)
	return ids
}
