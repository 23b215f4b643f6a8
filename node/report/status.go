package report

import "time"

// Status is a node's view of the cluster, for operators and tests.
type Status struct {
	ID         string  `json:"id"`
	Addr       string  `json:"addr"`
	GossipAddr string  `json:"gossip_addr"`
	State      string  `json:"state"` // raft state: Leader, Follower, Candidate, Shutdown
	Leader     string  `json:"leader"`
	LeaderAddr string  `json:"leader_addr"`
	Granting   bool    `json:"granting"` // this node leads and has passed its barrier
	Mode       string  `json:"mode"`     // ModeRaft, ModeLocal, ModePooled (fallback), ModeStopped
	Fraction   float64 `json:"fraction"` // this node's fallback fraction
	// HeldFraction is, on the leader, the part of each key's rate it may
	// grant now: 1 minus the fractions of members whose share it does not
	// hold. 0 on other nodes.
	HeldFraction float64 `json:"held_fraction"`
	// Horizons is how many keys have a committed horizon in the state as
	// this node applied it; KeysInMemory how many keys the leader's pacer
	// keeps (0 on other nodes). Keys made by a template leave both once
	// idle (pacer.DefaultIdleAfter), so both stay bounded.
	Horizons     int            `json:"horizons"`
	KeysInMemory int            `json:"keys_in_memory"`
	Term         uint64         `json:"term"`
	AppliedIndex uint64         `json:"applied_index"`
	Members      []MemberStatus `json:"members"`
	Limits       []LimitStatus  `json:"limits"`
	Pauses       []PauseStatus  `json:"pauses"`
	Caps         []CapStatus    `json:"caps"`
	Stats        Stats          `json:"stats"`
}

// A node's modes (Status.Mode, and the mode of its own entry in
// Status.Members): the String names of package node/fallback's Mode.
const (
	ModeRaft    = "raft"    // served from the leader's grants
	ModeLocal   = "local"   // fallback: paces its own callers at its fraction
	ModePooled  = "pooled"  // fallback: its fraction pooled through Postgres
	ModeStopped = "stopped" // fallback budget spent: admits nothing until a leader renews its share
)

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
// barrier and holding some share of the rate, or another node), or it
// paces in fallback (local or pooled) with a fraction > 0. Otherwise
// reason says why not.
func (st Status) Ready() (ok bool, reason string) {
	switch st.Mode {
	case ModeRaft:
		switch {
		case st.Leader == "":
			return false, "no leader known"
		case st.Leader == st.ID && !st.Granting:
			return false, "elected leader, not granting yet (waiting for its barrier)"
		case st.Leader == st.ID && st.HeldFraction <= 0:
			// A new leader holds a member's part of the rate only once
			// the member answers a renewal: until then it grants nothing.
			return false, "leading, but holds no share of the rate yet (waiting for the members' renewal answers)"
		}
		return true, ""
	case ModeLocal, ModePooled:
		if st.Fraction <= 0 {
			return false, "in " + st.Mode + " fallback with no fraction of its own"
		}
		return true, ""
	case ModeStopped:
		return false, "stopped: fallback budget exhausted, waiting for a leader to renew this node's share"
	}
	return false, "mode " + st.Mode
}

// LimitStatus is one key's limit and, on the leader, its pacing state.
type LimitStatus struct {
	Key       string        `json:"key"`
	Rate      float64       `json:"rate"`
	Burst     int           `json:"burst"`
	DryRun    bool          `json:"dry_run,omitempty"` // admits everything, counts what it would not have (fsm.Limit.DryRun)
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
