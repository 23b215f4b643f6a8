package membership

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace/internal/loop"
)

// joinLoop contacts the configured gossip addresses until one answers.
func (m *Membership) joinLoop(addrs []string) {
	defer m.wg.Done()
	backoff := 100 * time.Millisecond
	fromConfig := len(addrs) > 0
	for {
		if !fromConfig {
			// No --join: find the cluster through the addresses members
			// publish in Postgres (until this node knows a leader).
			if leaderKnown(m.d.Raft) {
				return
			}
			ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
			addrs = m.d.DiscoverJoin(ctx)
			cancel()
			if len(addrs) == 0 {
				if !m.sleep(backoff) {
					return
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
		}
		count, err := m.gossip.ml.Join(addrs)
		if count > 0 {
			m.log.Info("joined gossip", "contacted", count)
			return
		}
		if keyMismatch(err) {
			m.log.Error("join refused: "+KeyHint+"; retrying", "addrs", addrs, "err", err, "in", backoff)
		} else {
			m.log.Warn("join: no gossip address answered; retrying", "addrs", addrs, "err", err, "in", backoff)
		}
		if !m.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// bootstrapLoop forms the cluster once BootstrapExpect nodes that expect the
// same number see each other and none of them has state or a leader. Every
// node computes the same configuration (the expected number of lowest ids),
// so whichever bootstraps first, they agree.
func (m *Membership) bootstrapLoop() {
	defer m.wg.Done()
	expect := m.cfg.BootstrapExpect
	loop.Every(m.ctx, 200*time.Millisecond, m.gossip.kick, func() bool {
		if m.d.Raft.LastIndex() > 0 || leaderKnown(m.d.Raft) {
			m.gossip.markBootstrapped()
			return false
		}
		var ids []string
		members := m.gossip.snapshot()
		other := false
		for id, g := range members {
			if !g.Alive {
				continue
			}
			if g.bootstrapped && id != m.cfg.NodeID {
				other = true
			}
			if g.expect == expect && g.Addr != "" {
				ids = append(ids, id)
			}
		}
		if other {
			// A formed cluster exists: wait to be added by its leader.
			m.log.Info("a formed cluster is in gossip; waiting to be added instead of bootstrapping")
			m.gossip.markBootstrapped()
			return false
		}
		if len(ids) < expect {
			return true
		}
		sort.Strings(ids)
		ids = ids[:expect]
		var servers []raft.Server
		self := false
		for i, id := range ids {
			suffrage := raft.Voter
			if i >= m.cfg.Voters {
				suffrage = raft.Nonvoter
			}
			servers = append(servers, raft.Server{Suffrage: suffrage, ID: raft.ServerID(id), Address: raft.ServerAddress(members[id].Addr)})
			self = self || id == m.cfg.NodeID
		}
		if !self {
			m.log.Info("enough nodes to bootstrap, this one not among the first; waiting to be added", "ids", ids)
			m.gossip.markBootstrapped()
			return false
		}
		err := m.d.Raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			m.log.Error("bootstrap failed", "err", err)
			return true
		}
		m.log.Info("bootstrapped cluster", "servers", ids)
		m.gossip.markBootstrapped()
		return false
	})
}

func leaderKnown(r *raft.Raft) bool {
	addr, _ := r.LeaderWithID()
	return addr != ""
}
