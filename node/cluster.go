package node

import (
	"context"
	"fmt"

	"github.com/raftpace/raftpace/node/membership"
)

// Membership (gossip, bootstrap, reconcile, reclaim, leaderless notices) is
// node/membership's. This file is what the node hands it and status reads.

// gossip is the node's membership. Status reads its view of gossip through
// snapshot; the rest of the node calls membership's methods.
type gossip struct{ *membership.Membership }

// gossipMember is one member as gossip sees it, for status.
type gossipMember struct {
	meta   meta
	gossip string
	alive  bool
}

// meta is what a member gossips about itself that status shows.
type meta struct{ Addr string }

func (g *gossip) snapshot() map[string]gossipMember {
	out := make(map[string]gossipMember)
	for id, m := range g.Snapshot() {
		out[id] = gossipMember{meta: meta{Addr: m.Addr}, gossip: m.Gossip, alive: m.Alive}
	}
	return out
}

// startGossip builds the node's membership and starts its gossip; start
// runs its loops (Start) with the node's other loops.
func (n *Node) startGossip() error {
	cfg := n.cfg
	host, port, err := membership.SplitHostPort(cfg.GossipBindAddr)
	if err != nil {
		return fmt.Errorf("node: %w: GossipBindAddr: %w", ErrInvalidConfig, err)
	}
	mc := membership.Config{
		NodeID:            cfg.NodeID,
		Join:              cfg.Join,
		BootstrapExpect:   cfg.BootstrapExpect,
		Voters:            cfg.Voters,
		BindHost:          host,
		BindPort:          port,
		ClusterName:       cfg.ClusterName,
		TLS:               cfg.TLSCertFile != "", // Validate: all three TLS files or none
		ShareTTL:          cfg.ShareTTL,
		FailedServerAfter: cfg.FailedServerAfter,
		UseGrace:          cfg.UseGrace,
		WitnessTTL:        cfg.WitnessTTL,
		ReapAfter:         cfg.reapAfter(),
		UnsafeReclaim:     cfg.Unsafe.ReclaimWithoutFence,
		NoLeaderNotice:    20 * cfg.Timing.ElectionTimeout,
		Logger:            n.log,
	}
	if cfg.GossipAdvertiseAddr != "" {
		h, p, err := membership.SplitHostPort(cfg.GossipAdvertiseAddr)
		if err != nil {
			return fmt.Errorf("node: %w: GossipAdvertiseAddr: %w", ErrInvalidConfig, err)
		}
		mc.Advertise, mc.AdvertiseHost, mc.AdvertisePort = true, h, p
	}
	if mc.SecretKey, err = cfg.gossipKey(); err != nil {
		return err
	}
	d := membership.Deps{
		Raft:         n.raft,
		Addr:         n.Addr(),
		Now:          n.now,
		Leading:      n.pacer.IsLeading,
		Commit:       n.commitNow,
		Members:      n.state.Members,
		MemberWrites: &n.memberWrites,
		Shares:       n.shares,
		Probe:        n.trans.Probe,
	}
	if n.pg != nil {
		d.DiscoverJoin = n.pg.DiscoverJoin
		d.Fence = func(ctx context.Context, id string) (membership.FenceResult, error) {
			res, err := n.pg.Fence(ctx, id, n.cfg.fenceStale(), n.cfg.WitnessTTL)
			return membership.FenceResult{Fenced: res.Fenced, Wait: res.Wait, LastSeen: res.LastSeen, Reason: res.Reason}, err
		}
	}
	m, err := membership.New(n.ctx, mc, d)
	if err != nil {
		return err
	}
	n.gossip = &gossip{m}
	return nil
}

// Join asks the node to contact the given gossip addresses; the cluster's
// leader then adds it to raft. It returns how many addresses answered.
func (n *Node) Join(ctx context.Context, addrs []string) (int, error) {
	return n.gossip.Join(ctx, addrs)
}
