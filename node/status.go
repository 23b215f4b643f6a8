package node

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace/node/membership"
	"github.com/raftpace/raftpace/node/report"
	"github.com/raftpace/raftpace/node/shares"
)

// What a node reports has its shapes in package node/report; here they
// are filled in.

// Stats returns the node's counters.
func (n *Node) Stats() report.Stats {
	return report.Stats{
		Granted:        n.stats.granted.Load(),
		Refused:        n.stats.refused.Load(),
		UnknownKey:     n.stats.unknown.Load(),
		Forwarded:      n.stats.forwarded.Load(),
		LateGrants:     n.stats.lateGrants.Load(),
		Fallback:       n.stats.fallbackGrants.Load(),
		Forfeited:      n.stats.forfeited.Load(),
		Leases:         n.stats.leases.Load(),
		LeasedSlots:    n.stats.leasedSlots.Load(),
		Extensions:     n.stats.extensions.Load(),
		ExtendErrors:   n.stats.extendErrors.Load(),
		Pauses:         n.stats.pauses.Load(),
		PausedRefusals: n.stats.pausedRefusals.Load(),
		SlotsAcquired:  n.stats.slotsAcquired.Load(),
		SlotsRefused:   n.stats.slotsRefused.Load(),
		SlotsReleased:  n.stats.slotsReleased.Load(),
		SlotsExpired:   n.stats.slotsExpired.Load(),
	}
}

// Status returns this node's view of the cluster.
func (n *Node) Status(ctx context.Context) (report.Status, error) {
	if err := ctx.Err(); err != nil {
		return report.Status{}, err
	}
	leaderAddr, leaderID := n.raft.LeaderWithID()
	term, _ := strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	st := report.Status{
		ID:           n.cfg.NodeID,
		Addr:         n.Addr(),
		GossipAddr:   n.GossipAddr(),
		State:        n.raft.State().String(),
		Leader:       string(leaderID),
		LeaderAddr:   string(leaderAddr),
		Granting:     n.pacer.IsLeading(),
		Mode:         n.fallback.Current().String(),
		Fraction:     n.ownFraction(),
		Term:         term,
		AppliedIndex: n.state.AppliedIndex(),
		Horizons:     n.state.HorizonCount(),
		KeysInMemory: n.pacer.KeysInMemory(),
		Stats:        n.Stats(),
	}
	held, sv := n.shares.View()
	st.HeldFraction = held
	gm := n.gossip.snapshot()
	seen := make(map[string]bool)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			m := report.MemberStatus{ID: string(s.ID), Addr: string(s.Address), Role: "voter", Health: "unknown", Leader: s.ID == leaderID}
			if s.Suffrage != raft.Voter {
				m.Role = "nonvoter"
			}
			if g, ok := gm[m.ID]; ok {
				m.Health = membership.Health(g.alive)
				m.GossipAddr = g.gossip
			}
			if v, ok := sv[m.ID]; ok {
				m.Fraction, m.ShareHeld = v.Fraction, v.Held
				if st.Granting {
					m.LastContact = v.LastAck
					m.Mode = n.memberMode(v)
				}
			}
			if m.ID == st.ID && m.Mode == "" {
				m.Mode = st.Mode
			}
			st.Members = append(st.Members, m)
			seen[m.ID] = true
		}
	}
	for id, g := range gm {
		// Gossip-only members are shown while they are alive: about to join.
		if !seen[id] && g.alive {
			st.Members = append(st.Members, report.MemberStatus{ID: id, Addr: g.meta.Addr, GossipAddr: g.gossip, Role: "none", Health: membership.Health(g.alive)})
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	views := n.pacer.View()
	now := time.Now()
	for key, lim := range n.state.Limits() {
		v := views[key]
		st.Limits = append(st.Limits, report.LimitStatus{Key: key, Rate: lim.Rate, Burst: lim.Burst, DryRun: lim.DryRun, HorizonIn: v.HorizonIn, Backlog: v.Backlog,
			Admitted10s: n.admittedHist.Rate(key, now, 10), Granted10s: n.grantedHist.Rate(key, now, 10)})
	}
	sort.Slice(st.Limits, func(i, j int) bool { return st.Limits[i].Key < st.Limits[j].Key })
	st.Pauses = []report.PauseStatus{}
	for key, d := range n.Pauses() {
		st.Pauses = append(st.Pauses, report.PauseStatus{Key: key, Remaining: d})
	}
	sort.Slice(st.Pauses, func(i, j int) bool { return st.Pauses[i].Key < st.Pauses[j].Key })
	st.Caps = []report.CapStatus{}
	inUse := n.SlotsInUse()
	for key, c := range n.state.Caps() {
		st.Caps = append(st.Caps, report.CapStatus{Key: key, Max: c, InUse: inUse[key]})
	}
	sort.Slice(st.Caps, func(i, j int) bool { return st.Caps[i].Key < st.Caps[j].Key })
	return st, nil
}

// memberMode is the leader's view of a member's mode from its share state.
func (n *Node) memberMode(v shares.MemberView) string {
	switch {
	case v.Held:
		return report.MemberRaft
	case v.LastAck > n.cfg.ShareTTL+n.cfg.FallbackFor:
		return report.MemberStopped
	}
	return report.MemberFallback
}
