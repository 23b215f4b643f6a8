package node

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// shares is the leader's record of whose fallback fraction it holds
// (DESIGN 5). Member i's fraction f_i is spent by exactly one side at any
// moment: by the leader while it holds i's share lease, by i itself (in
// fallback) once that lease has lapsed.
//
// Holder measures from its request: the leader sends a renewal at q; the
// member answers at s >= q, promising no fallback before s + ShareTTL; the
// leader counts the share only for slots before q + ShareTTL. A member that
// comes back from fallback reports how far its fallback slots still reach,
// and the leader counts its share only from when the answer arrived plus
// that. Lost or late messages can therefore only make the leader count
// less.
//
// The leader paces a slot at time t at R*(1 - sum of fractions not held
// at t). A fraction not held counts at the larger of its committed value
// and the value the member last reported, since a member cut off may not
// have applied a shrink.
type shares struct {
	now func() int64
	ttl int64

	mu      sync.Mutex
	leading bool
	since   int64 // when this leadership began
	by      map[string]*shareState
	fracs   map[string]float64 // committed fractions (fsm members)
	cache   fcache
	// changed is closed (and replaced) when the shares' reach may have
	// moved as a whole: at the end of a renewal round, and when a
	// leadership starts or ends or a fraction comes back. A request whose
	// slots lie past the reach waits on it. Not at each member's answer:
	// a waiter woken between two answers of one round would see F fall
	// at the members not renewed yet and take a lease paced at a third
	// of the rate (measured: 10 slow keys at 63%).
	changed atomic.Pointer[chan struct{}]
}

// touch drops the cached F; s.mu is held.
func (s *shares) touch() {
	s.cache.valid = false
}

// wake releases the requests waiting for the shares' reach to move; s.mu
// is held.
func (s *shares) wake() {
	s.touch()
	next := make(chan struct{})
	close(*s.changed.Swap(&next))
}

// roundDone marks the end of a round of renewals.
func (s *shares) roundDone() {
	s.mu.Lock()
	s.wake()
	s.mu.Unlock()
}

// changes returns a channel closed at the next change of the shares. It
// takes no lock: the pacer reads it for every grant, before F.
func (s *shares) changes() <-chan struct{} {
	return *s.changed.Load()
}

type shareState struct {
	heldFrom, heldUntil int64 // the leader counts f_i for slots in [heldFrom, heldUntil)
	// releasedFrom, when not 0: the member gave its fraction back (it left,
	// was fenced through the witness, or was reaped) and the leader counts
	// it for every slot from then on. A later renewal answer clears it.
	releasedFrom int64
	lastAck      int64   // send time q of the last answered renewal (or leadership start)
	reported     float64 // the fraction the member last said it applies
	applied      uint64  // the member's applied index at its last answer
}

// fcache remembers F for slot intervals inside [from, until).
type fcache struct {
	valid       bool
	from, until int64
	f           float64
}

func newShares(now func() int64, ttl time.Duration) *shares {
	s := &shares{now: now, ttl: int64(ttl), by: make(map[string]*shareState), fracs: make(map[string]float64)}
	ch := make(chan struct{})
	s.changed.Store(&ch)
	return s
}

// lead starts a new leadership: nothing is held until renewed; every member
// counts as last heard now (reaping waits a full ReapAfter from here).
func (s *shares) lead(members []fsm.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.leading, s.since = true, now
	s.by = make(map[string]*shareState)
	s.setMembersLocked(members)
	for id := range s.fracs {
		s.by[id] = &shareState{lastAck: now, reported: s.fracs[id]}
	}
	s.wake()
}

func (s *shares) stepDown() {
	s.mu.Lock()
	s.leading = false
	s.wake()
	s.mu.Unlock()
}

// setMembers follows the committed member list.
func (s *shares) setMembers(members []fsm.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setMembersLocked(members)
}

func (s *shares) setMembersLocked(members []fsm.Member) {
	s.fracs = make(map[string]float64, len(members))
	for _, m := range members {
		s.fracs[m.ID] = m.Fraction
		if s.leading && s.by[m.ID] == nil {
			s.by[m.ID] = &shareState{lastAck: s.now(), reported: m.Fraction}
		}
	}
	// A forgotten member's state goes with it: if the same id joins again
	// (restarted after it left) it starts afresh, not released.
	for id := range s.by {
		if _, ok := s.fracs[id]; !ok {
			delete(s.by, id)
		}
	}
	s.touch()
}

// renewed records an answer to a renewal sent at q and received at r.
func (s *shares) renewed(id string, q, r int64, a wire.ShareAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return
	}
	st := s.by[id]
	if st == nil {
		st = &shareState{}
		s.by[id] = st
	}
	if st.heldUntil <= r || a.Busy > 0 {
		// The share had lapsed (or the member was in fallback): count it
		// only once the member's own fallback slots are done.
		st.heldFrom = r + int64(a.Busy)
	}
	st.heldUntil = max(st.heldUntil, q+s.ttl)
	if !a.Departing {
		// A fenced or reaped member that answers again is held as any
		// member; a leaving one stays released.
		st.releasedFrom = 0
	}
	st.lastAck = max(st.lastAck, q)
	st.reported = a.Fraction
	st.applied = a.Applied
	s.touch()
}

// fracEpsilon is the rounding tolerance of a sum of fractions.
const fracEpsilon = 1e-9

// fraction returns F for slots in [a, b]: 1 minus the fractions not held
// for the whole interval. 0 when not leading.
func (s *shares) fraction(a, b int64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return 0
	}
	if c := s.cache; c.valid && a >= c.from && b < c.until {
		return c.f
	}
	unheld := 0.0
	from, until := int64(math.MinInt64), int64(math.MaxInt64)
	for id, committed := range s.fracs {
		st := s.by[id]
		f := committed
		if st != nil && st.reported > f {
			f = st.reported
		}
		if st != nil && st.releasedFrom != 0 && st.releasedFrom <= a {
			from = max(from, st.releasedFrom)
			continue
		}
		if st != nil && st.heldFrom <= a && b < st.heldUntil {
			from, until = max(from, st.heldFrom), min(until, st.heldUntil)
			continue
		}
		unheld += f
		if st != nil && st.heldFrom > a {
			until = min(until, st.heldFrom) // may be held later
		} else if st != nil && st.heldUntil > st.heldFrom {
			// Held once, but not for the whole of [a, b]: unheld for
			// every interval that starts at or after heldUntil. One that
			// starts earlier and ends before it is held, so the value may
			// not be cached for it. (It was: one slow key asking for a
			// slot past the last renewal's reach cached F = 0 for every
			// interval, and every key's leases stopped until the next
			// renewal.)
			from = max(from, st.heldUntil)
		}
		if st != nil && st.releasedFrom > a {
			until = min(until, st.releasedFrom) // released later
		}
	}
	// Fractions are 1/N: their sum is 1 only up to float rounding (ten of
	// 0.1 leave 1.1e-16), and an F of 1e-16 would stretch the emission
	// interval past int64 in scaled. Snap to 0 and 1 within fracEpsilon.
	F := 1 - unheld
	switch {
	case F < fracEpsilon:
		F = 0
	case F > 1-fracEpsilon:
		F = 1
	}
	if a >= from && b < until {
		s.cache = fcache{valid: true, from: from, until: until, f: F}
	}
	return F
}

// unheld returns the fractions not held at now (each at the larger of its
// committed and reported value); all of them when not leading.
func (s *shares) unheld(now int64) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []float64
	for id, committed := range s.fracs {
		st := s.by[id]
		f := committed
		if st != nil && st.reported > f {
			f = st.reported
		}
		if s.leading && st != nil && st.counted(now) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// view lists the share states for status.
func (s *shares) view() (held float64, members map[string]shareView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	members = make(map[string]shareView)
	held = 1
	for id, committed := range s.fracs {
		st := s.by[id]
		v := shareView{Fraction: committed}
		if st != nil {
			v.Held = s.leading && st.counted(now)
			v.Released = st.releasedFrom != 0
			v.LastAck = time.Duration(now - st.lastAck)
			v.Reported = st.reported
		}
		if !v.Held {
			held -= max(committed, v.Reported)
		}
		members[id] = v
	}
	if !s.leading {
		held = 0
	}
	return max(0, held), members
}

type shareView struct {
	Fraction, Reported float64
	Held, Released     bool
	LastAck            time.Duration
}

// counted reports whether the leader may spend the member's fraction at t:
// it holds the share then, or the member gave the fraction back by then.
func (st *shareState) counted(t int64) bool {
	return (st.releasedFrom != 0 && st.releasedFrom <= t) || (st.heldFrom <= t && t < st.heldUntil)
}

// release records that member id spends no fallback from slot time from
// on (it left, was fenced, or was reaped): the leader counts its fraction
// for every slot from then on, until the member answers a renewal again.
func (s *shares) release(id string, from int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return
	}
	st := s.by[id]
	if st == nil {
		st = &shareState{lastAck: s.now()}
		s.by[id] = st
	}
	if st.releasedFrom == 0 || from < st.releasedFrom {
		st.releasedFrom = max(from, 1)
	}
	s.wake()
}

// rejoined drops the release of member id: a new incarnation of it joined
// (a node restarted under the same id after it left). It spends no
// fallback before a leader renews it, and until then the leader counts its
// fraction only by the holder rule (less, never more). Left in place, the
// release would make reclaim remove the new incarnation from raft.
func (s *shares) rejoined(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.by[id]; st != nil && st.releasedFrom != 0 {
		st.releasedFrom = 0
		s.touch()
	}
}

// released lists the members whose fraction has been given back by now:
// they may be forgotten (removed from the replicated member list).
func (s *shares) released(now int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, st := range s.by {
		if _, member := s.fracs[id]; member && st.releasedFrom != 0 && st.releasedFrom <= now {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// isReleased reports whether member id gave its fraction back (at any time).
func (s *shares) isReleased(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[id]
	return st != nil && st.releasedFrom != 0
}

// silence returns how long member id has not answered a renewal (since
// this leadership began, at most), and whether the leader's share of it has
// lapsed. Not leading: 0, false.
func (s *shares) silence(id string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[id]
	if !s.leading || st == nil {
		return 0, false
	}
	now := s.now()
	return time.Duration(now - st.lastAck), now >= st.heldUntil
}

// caughtUp reports whether member id answered a renewal in the last
// within and had then applied index.
func (s *shares) caughtUp(id string, within time.Duration, index uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[id]
	return s.leading && st != nil && st.heldUntil > 0 && s.now()-st.lastAck <= int64(within) && st.applied >= index
}

// overdue lists members (other than self) not heard from for after and
// not released yet.
func (s *shares) overdue(self string, after time.Duration) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return nil
	}
	now := s.now()
	var out []string
	for id, st := range s.by {
		if _, member := s.fracs[id]; member && id != self && st.releasedFrom == 0 && now-st.lastAck > int64(after) && now >= st.heldUntil {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// allApplied reports whether every member has said it applied index.
func (s *shares) allApplied(index uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.fracs {
		if st := s.by[id]; st == nil || st.applied < index {
			return false
		}
	}
	return true
}

// shareLoop runs on every node; while it leads, it renews every member's
// share lease (its own by a local call) every ShareTTL/3 and keeps
// fractions at 1/N, shrinking before growing. Taking back the fractions of
// members that are gone is reclaim's (churn.go).
func (n *Node) shareLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.ShareTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if !n.pacer.isLeading() {
			continue
		}
		n.renewShares()
		if err := n.balanceFractions(); err != nil {
			n.log.Warn("balancing fractions", "err", err)
		}
	}
}

// renewShares sends one round of renewals and waits for the answers (each
// bounded by a third of the TTL: a later answer is not counted).
func (n *Node) renewShares() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	timeout := n.cfg.ShareTTL / 3
	var wg sync.WaitGroup
	for _, srv := range f.Configuration().Servers {
		id, addr := string(srv.ID), string(srv.Address)
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := n.now()
			var a wire.ShareAnswer
			var err error
			if id == n.cfg.NodeID {
				a = n.fallback.renew()
			} else {
				ctx, cancel := context.WithTimeout(n.ctx, timeout)
				a, err = n.callShare(ctx, addr)
				cancel()
			}
			r := n.now()
			if err != nil || r-q > int64(timeout) {
				return
			}
			n.shares.renewed(id, q, r, a)
			if a.Fenced {
				n.unfence(id) // this leader holds its share now
			}
		}()
	}
	wg.Wait()
	n.shares.roundDone()
}

func (n *Node) callShare(ctx context.Context, addr string) (wire.ShareAnswer, error) {
	raw, err := n.trans.Call(ctx, addr, wire.MethodShare, wire.ShareReq{Leader: n.cfg.NodeID}.Encode())
	if err != nil {
		return wire.ShareAnswer{}, err
	}
	return wire.DecodeShareAnswer(raw)
}

// balanceFractions moves every member's fraction toward 1/N: shrinks are
// committed first; growth waits until every member has applied them (it
// says so in its renewal answers), so no member can believe a fraction
// larger than its share of 1 while another's grows.
func (n *Node) balanceFractions() error {
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	members := n.state.Members()
	if len(members) == 0 {
		return nil
	}
	target := 1 / float64(len(members))
	const eps = 1e-9
	var grow []fsm.Member
	for _, m := range members {
		switch {
		case m.Fraction > target+eps:
			m.Fraction = target
			index, err := n.applyMember(m)
			if err != nil {
				return err
			}
			n.fractionIndex.Store(index)
			n.log.Info("fallback fraction shrunk", "member", m.ID, "fraction", target)
		case m.Fraction < target-eps:
			grow = append(grow, m)
		}
	}
	if len(grow) == 0 || !n.shares.allApplied(n.fractionIndex.Load()) {
		return nil
	}
	for _, m := range grow {
		m.Fraction = target
		if _, err := n.applyMember(m); err != nil {
			return err
		}
		n.log.Info("fallback fraction grown", "member", m.ID, "fraction", target)
	}
	return nil
}

func (n *Node) applyMember(m fsm.Member) (uint64, error) {
	return n.commit(&fsm.UpsertMember{Member: m}, 5*time.Second)
}
