package node

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftpace/raftpace/node/shares"
)

// Status is a node's view of the cluster, for operators and tests.
type Status struct {
	ID         string  `json:"id"`
	Addr       string  `json:"addr"`
	GossipAddr string  `json:"gossip_addr"`
	State      string  `json:"state"` // raft state: Leader, Follower, Candidate, Shutdown
	Leader     string  `json:"leader"`
	LeaderAddr string  `json:"leader_addr"`
	Granting   bool    `json:"granting"` // this node leads and has passed its barrier
	Mode       string  `json:"mode"`     // raft, local (fallback), stopped
	Fraction   float64 `json:"fraction"` // this node's fallback fraction
	// HeldFraction is, on the leader, the part of each key's rate it may
	// grant now: 1 minus the fractions of members whose share it does not
	// hold. 0 on other nodes.
	HeldFraction float64        `json:"held_fraction"`
	Term         uint64         `json:"term"`
	AppliedIndex uint64         `json:"applied_index"`
	Members      []MemberStatus `json:"members"`
	Limits       []LimitStatus  `json:"limits"`
	Pauses       []PauseStatus  `json:"pauses"`
	Caps         []CapStatus    `json:"caps"`
	Stats        Stats          `json:"stats"`
}

// PauseStatus is a key's pause in force, as this node measures it.
type PauseStatus struct {
	Key       string        `json:"key"`
	Remaining time.Duration `json:"remaining_ns"`
}

// CapStatus is a key's concurrency cap and the slots held under it, as
// this node measures them (SlotsInUse).
type CapStatus struct {
	Key   string `json:"key"`
	Max   int    `json:"max"`
	InUse int    `json:"in_use"`
}

// MemberStatus describes one member of raft's configuration (or a node
// seen in gossip that is not in it yet, with Role "none").
type MemberStatus struct {
	ID         string  `json:"id"`
	Addr       string  `json:"addr"`
	GossipAddr string  `json:"gossip_addr,omitempty"`
	Role       string  `json:"role"` // voter, nonvoter, none
	Fraction   float64 `json:"fraction"`
	ShareHeld  bool    `json:"share_held"` // (leader's view) the leader holds its share now
	Health     string  `json:"health"`     // alive, failed (left or unreachable), unknown (not seen in gossip yet)
	Leader     bool    `json:"leader"`
	// Mode is how the member admits, as this node knows it: on the leader,
	// MemberRaft while it holds the member's share, MemberFallback when it
	// does not (the member paces itself at its fraction, locally or pooled,
	// or is about to), MemberStopped when the member has not answered for
	// ShareTTL + FallbackFor (it has stopped admitting). On other nodes only
	// the node's own entry has a mode (its own); the others are "".
	Mode string `json:"mode,omitempty"`
	// LastContact is, on the leader, how long ago the member last answered
	// a share renewal (measured from when the renewal was sent, or from the
	// start of this leadership if it has not answered since). 0 on other
	// nodes.
	LastContact time.Duration `json:"last_contact_ns,omitempty"`
}

// Member modes as the leader sees them (MemberStatus.Mode).
const (
	MemberRaft     = "raft"
	MemberFallback = "fallback"
	MemberStopped  = "stopped"
)

// Ready reports whether the node can admit events under the promise now:
// it is in raft mode and knows a leader that grants (itself, past its
// barrier, or another node), or it paces in fallback (local or pooled)
// with a fraction > 0. Otherwise reason says why not.
func (st Status) Ready() (ok bool, reason string) {
	switch st.Mode {
	case ModeRaft.String():
		switch {
		case st.Leader == "":
			return false, "no leader known"
		case st.Leader == st.ID && !st.Granting:
			return false, "elected leader, not granting yet (waiting for its barrier)"
		}
		return true, ""
	case ModeLocal.String(), ModePooled.String():
		if st.Fraction <= 0 {
			return false, "in " + st.Mode + " fallback with no fraction of its own"
		}
		return true, ""
	case ModeStopped.String():
		return false, "stopped: fallback budget exhausted, waiting for a leader to renew this node's share"
	}
	return false, "mode " + st.Mode
}

// LimitStatus is one key's limit and, on the leader, its pacing state.
type LimitStatus struct {
	Key       string        `json:"key"`
	Rate      float64       `json:"rate"`
	Burst     int           `json:"burst"`
	HorizonIn time.Duration `json:"horizon_in_ns,omitempty"`
	Backlog   time.Duration `json:"backlog_ns,omitempty"`
	// Admitted10s is the mean rate (events per second) this node granted to
	// its own callers over the last 10 whole seconds; Granted10s, on the
	// leader, the rate of slots it granted to the whole fleet (leased slots
	// included, used or not), 0 on followers.
	Admitted10s float64 `json:"admitted_10s"`
	Granted10s  float64 `json:"granted_10s"`
}

// Stats are the node's counters since it started.
type Stats struct {
	Granted        uint64 `json:"granted"`         // reservations granted to this node's callers
	Refused        uint64 `json:"refused"`         // raftpace.ErrLimitExceeded answers
	UnknownKey     uint64 `json:"unknown_key"`     // raftpace.ErrUnknownKey answers
	Forwarded      uint64 `json:"forwarded"`       // reservations sent to the leader
	LateGrants     uint64 `json:"late_grants"`     // forwarded grants that arrived after their UseBy, asked for again
	Fallback       uint64 `json:"fallback"`        // reservations granted by this node's own fallback pacer
	Forfeited      uint64 `json:"forfeited"`       // grants a caller could not use by their UseBy (see Forfeit)
	Leases         uint64 `json:"leases"`          // leases this node received
	LeasedSlots    uint64 `json:"leased_slots"`    // slots in them
	Extensions     uint64 `json:"extensions"`      // horizon entries committed by this node as leader
	ExtendErrors   uint64 `json:"extend_errors"`   // horizon entries that failed to commit
	Pauses         uint64 `json:"pauses"`          // pauses this node committed as leader
	PausedRefusals uint64 `json:"paused_refusals"` // reservations refused because a pause outlasted their max wait
	SlotsAcquired  uint64 `json:"slots_acquired"`  // concurrency slots granted to this node's callers
	SlotsRefused   uint64 `json:"slots_refused"`   // acquisitions that hit raftpace.ErrConcurrencyLimit
	SlotsReleased  uint64 `json:"slots_released"`  // slots this node's callers gave back
	SlotsExpired   uint64 `json:"slots_expired"`   // slots this node reclaimed at their TTL as leader
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	return Stats{
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
func (n *Node) Status(ctx context.Context) (Status, error) {
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	leaderAddr, leaderID := n.raft.LeaderWithID()
	term, _ := strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	st := Status{
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
		Stats:        n.Stats(),
	}
	held, sv := n.shares.View()
	st.HeldFraction = held
	gm := n.gossip.snapshot()
	seen := make(map[string]bool)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			m := MemberStatus{ID: string(s.ID), Addr: string(s.Address), Role: "voter", Health: "unknown", Leader: s.ID == leaderID}
			if s.Suffrage != raft.Voter {
				m.Role = "nonvoter"
			}
			if g, ok := gm[m.ID]; ok {
				m.Health = health(g.alive)
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
			st.Members = append(st.Members, MemberStatus{ID: id, Addr: g.meta.Addr, GossipAddr: g.gossip, Role: "none", Health: health(g.alive)})
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	views := n.pacer.View()
	now := time.Now()
	for key, lim := range n.state.Limits() {
		v := views[key]
		st.Limits = append(st.Limits, LimitStatus{Key: key, Rate: lim.Rate, Burst: lim.Burst, HorizonIn: v.HorizonIn, Backlog: v.Backlog,
			Admitted10s: n.admittedHist.Rate(key, now, 10), Granted10s: n.grantedHist.Rate(key, now, 10)})
	}
	sort.Slice(st.Limits, func(i, j int) bool { return st.Limits[i].Key < st.Limits[j].Key })
	st.Pauses = []PauseStatus{}
	for key, d := range n.Pauses() {
		st.Pauses = append(st.Pauses, PauseStatus{Key: key, Remaining: d})
	}
	sort.Slice(st.Pauses, func(i, j int) bool { return st.Pauses[i].Key < st.Pauses[j].Key })
	st.Caps = []CapStatus{}
	inUse := n.SlotsInUse()
	for key, c := range n.state.Caps() {
		st.Caps = append(st.Caps, CapStatus{Key: key, Max: c, InUse: inUse[key]})
	}
	sort.Slice(st.Caps, func(i, j int) bool { return st.Caps[i].Key < st.Caps[j].Key })
	return st, nil
}

// memberMode is the leader's view of a member's mode from its share state.
func (n *Node) memberMode(v shares.MemberView) string {
	switch {
	case v.Held:
		return MemberRaft
	case v.LastAck > n.cfg.ShareTTL+n.cfg.FallbackFor:
		return MemberStopped
	}
	return MemberFallback
}
