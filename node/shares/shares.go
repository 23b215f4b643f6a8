// Package shares keeps the conservation of the rate between a leader and
// its members (DESIGN 5): which member fractions the leader holds, for
// which slot times, and so F, the part of every key's rate the leader may
// grant at a slot time (Fraction, the pacer's ShareSource). It records
// renewal answers, releases of departing members and who is overdue; it
// sends nothing itself (node's share loop renews and commits fractions)
// and takes time from a now function, so every rule is tested on a fake
// clock.
package shares

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// Shares is the leader's record of whose fallback fraction it holds
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
type Shares struct {
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
func (s *Shares) touch() {
	s.cache.valid = false
}

// wake releases the requests waiting for the shares' reach to move; s.mu
// is held.
func (s *Shares) wake() {
	s.touch()
	next := make(chan struct{})
	close(*s.changed.Swap(&next))
}

// roundDone marks the end of a round of renewals.
func (s *Shares) RoundDone() {
	s.mu.Lock()
	s.wake()
	s.mu.Unlock()
}

// Changes returns a channel closed at the next change of the shares. It
// takes no lock: the pacer reads it for every grant, before F.
func (s *Shares) Changes() <-chan struct{} {
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

func New(now func() int64, ttl time.Duration) *Shares {
	s := &Shares{now: now, ttl: int64(ttl), by: make(map[string]*shareState), fracs: make(map[string]float64)}
	ch := make(chan struct{})
	s.changed.Store(&ch)
	return s
}

// lead starts a new leadership: nothing is held until renewed; every member
// counts as last heard now (reaping waits a full ReapAfter from here).
func (s *Shares) Lead(members []fsm.Member) {
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

func (s *Shares) StepDown() {
	s.mu.Lock()
	s.leading = false
	s.wake()
	s.mu.Unlock()
}

// setMembers follows the committed member list.
func (s *Shares) SetMembers(members []fsm.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setMembersLocked(members)
}

func (s *Shares) setMembersLocked(members []fsm.Member) {
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
func (s *Shares) Renewed(id string, q, r int64, a wire.ShareAnswer) {
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
	if st.heldUntil <= r || a.Busy > 0 || st.heldFrom > r {
		// The share had lapsed (or the member's fallback grants still
		// reach past the answer): count it only once they are done. Every
		// answer reports that reach afresh, and the latest is the one to
		// trust: a member whose leave of the Postgres pool did not answer
		// in time reports the registration's TTL first, the pool's real
		// reach once the leave answered (node/fallback, leavePoolNow).
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

// Overrun is how far past the shares' reach a grant paced at interval
// may claim the rate (wire.ShareOverrun at this leader's ShareTTL).
func (s *Shares) Overrun(interval int64) int64 {
	return int64(wire.ShareOverrun(time.Duration(interval), time.Duration(s.ttl)))
}

// fracEpsilon is the rounding tolerance of a sum of fractions.
const fracEpsilon = 1e-9

// snap rounds F to 0 and 1 within fracEpsilon. Fractions are 1/N: their
// sum is 1 only up to float rounding (ten of 0.1 leave 1.1e-16), and an F
// of 1e-16 would stretch the emission interval past int64 in the pacer.
func snap(F float64) float64 {
	switch {
	case F < fracEpsilon:
		return 0
	case F > 1-fracEpsilon:
		return 1
	}
	return F
}

// weight is what member st's fraction counts for while it is not held:
// the larger of its committed value and the value it last reported (a
// member cut off may not have applied a shrink).
func weight(committed float64, st *shareState) float64 {
	if st != nil && st.reported > committed {
		return st.reported
	}
	return committed
}

// Fraction returns F for slots in [a, b]: 1 minus the fractions not held
// for the whole interval. 0 when not leading.
func (s *Shares) Fraction(a, b int64) float64 {
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
		f := weight(committed, st)
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
	F := snap(1 - unheld)
	if a >= from && b < until {
		s.cache = fcache{valid: true, from: from, until: until, f: F}
	}
	return F
}

// Rise predicts when F rises next: the earliest slot time after now from
// which a member not counted at now will be (its fallback grants reach
// until then, as its renewal answers said: its share is held from then
// as long as it keeps answering; or a release recorded for later), and F
// from then, if every member counted now still is. false: no rise is
// known (a member that does not answer may be fenced or reaped, but when
// is not known). A prediction for the pacer's choice between granting at
// a small F now and waiting for a larger one, never a grant's F.
func (s *Shares) Rise(now int64) (at int64, F float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return 0, 0, false
	}
	rise := func(st *shareState) int64 {
		switch {
		case st == nil || st.counted(now):
			return 0
		case st.releasedFrom > now:
			return st.releasedFrom
		case st.heldFrom > now:
			return st.heldFrom
		}
		return 0
	}
	for id := range s.fracs {
		if next := rise(s.by[id]); next != 0 && (!ok || next < at) {
			at, ok = next, true
		}
	}
	if !ok {
		return 0, 0, false
	}
	unheld := 0.0
	for id, committed := range s.fracs {
		st := s.by[id]
		if next := rise(st); (st != nil && st.counted(now)) || (next != 0 && next <= at) {
			continue
		}
		unheld += weight(committed, st)
	}
	return at, snap(1 - unheld), true
}

// unheld returns the fractions not held at now (each at the larger of its
// committed and reported value); all of them when not leading.
func (s *Shares) Unheld(now int64) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []float64
	for id, committed := range s.fracs {
		st := s.by[id]
		f := weight(committed, st)
		if s.leading && st != nil && st.counted(now) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// view lists the share states for status.
func (s *Shares) View() (held float64, members map[string]MemberView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	members = make(map[string]MemberView)
	held = 1
	for id, committed := range s.fracs {
		st := s.by[id]
		v := MemberView{Fraction: committed}
		if st != nil {
			v.Held = s.leading && st.counted(now)
			v.Released = st.releasedFrom != 0
			v.LastAck = time.Duration(now - st.lastAck)
			v.Reported = st.reported
		}
		if !v.Held {
			held -= weight(committed, st)
		}
		members[id] = v
	}
	if !s.leading {
		held = 0
	}
	return max(0, held), members
}

type MemberView struct {
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
func (s *Shares) Release(id string, from int64) {
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
func (s *Shares) Rejoined(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.by[id]; st != nil && st.releasedFrom != 0 {
		st.releasedFrom = 0
		s.touch()
	}
}

// released lists the members whose fraction has been given back by now:
// they may be forgotten (removed from the replicated member list).
func (s *Shares) Released(now int64) []string {
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
func (s *Shares) IsReleased(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[id]
	return st != nil && st.releasedFrom != 0
}

// silence returns how long member id has not answered a renewal (since
// this leadership began, at most), and whether the leader's share of it has
// lapsed. Not leading: 0, false.
func (s *Shares) Silence(id string) (time.Duration, bool) {
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
func (s *Shares) CaughtUp(id string, within time.Duration, index uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.by[id]
	return s.leading && st != nil && st.heldUntil > 0 && s.now()-st.lastAck <= int64(within) && st.applied >= index
}

// overdue lists members (other than self) not heard from for after and
// not released yet.
func (s *Shares) Overdue(self string, after time.Duration) []string {
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
func (s *Shares) AllApplied(index uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.fracs {
		if st := s.by[id]; st == nil || st.applied < index {
			return false
		}
	}
	return true
}
