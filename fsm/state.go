package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// State is the replicated state of a raftpace cluster: the limit of each
// key, the committed horizon of each key, the members, the refusal pause of
// each key, the concurrency cap of each key, the held concurrency slots and
// the index of the last applied log entry.
//
// Every replica that applies the same commands at the same indexes from the
// same starting state holds the same State, and its Snapshot is the same
// bytes: Apply reads no clock, no randomness and no map order.
//
// # Horizons
//
// A key's horizon is the Ahead of the latest ExtendHorizons entry that named
// it. Each replica measures it from its own local time of applying that
// entry (the node records that time; State stores only the duration), and a
// restored snapshot counts as applied at the moment of restore. A later
// entry overwrites an earlier one, even with a smaller Ahead: it is not a
// running maximum. That is safe because of the leader's protocol: the
// leader measures each horizon from the moment it proposes the entry (no
// replica can apply it earlier), grants only slots before the horizon so
// measured and only once the entry is committed, and chooses each new Ahead so that, measured from the new proposal, it covers every
// slot granted under earlier entries of the key. Measured from any
// replica's later apply time, the latest entry alone therefore covers every
// slot ever granted for the key. An earlier entry may reach further on a
// replica that applied it late, but that extra covers no grant; and a
// maximum of durations measured from different apply times would mean
// nothing.
//
// An entry with Ahead 0 removes the key's horizon: no slot was granted
// past the moment it was proposed, so every replica's later apply time
// covers them all. The leader sends one for an idle key, so that keys a
// template made do not stay in the state for ever.
//
// DeleteLimit removes a key's limit but keeps its horizon, so that a key
// deleted and created again cannot be granted slots that overlap ones
// granted before the delete.
//
// # Pauses
//
// A key's pause is the For of the latest SetPause that named it, measured
// like a horizon from each replica's own local time of applying the entry
// (the node records that time; State stores only the duration; a restored
// snapshot counts as applied at the moment of restore). A later entry
// overwrites an earlier one, even with a smaller For, for the same reason
// as horizons: the leader proposes For = (its current deadline for the key,
// max the new hint) - proposal time, so the latest entry alone, measured
// from any replica's later apply time, covers every earlier pause. For = 0
// (the deadline has passed) removes the pause. A pause is independent of
// the key's limit: DeleteLimit keeps it.
//
// # Concurrency slots
//
// A key's cap is the Max of the latest SetCap that named it, until a
// DeleteCap. A slot is one held unit of concurrency: an ID, the member
// holding it, the keys it counts against and a TTL measured, like a
// horizon, from each replica's local apply time (or from restore).
//
// Apply does not enforce caps: whether a slot still counts against its
// keys depends on whether its TTL has run out, which needs a clock, and
// replicas measuring from different apply times would disagree, so a
// check in Apply could accept an entry on one replica and refuse it on
// another. The leader checks the cap against the live slots before it
// proposes an AcquireSlots; the state only records what it decided. For
// the same reason expired slots stay until a ReleaseSlots removes them.
//
// AcquireSlots of an ID that is already held changes nothing but
// AppliedIndex, even if its other fields differ: a proposal retried after a
// timeout may commit twice, and the second copy must neither add a slot nor
// restart the first one's TTL. ReleaseSlots ignores ids that are not held,
// for the same reason. Neither checks that Holder is a member or that a key
// has a cap: either may have been removed while the entry was in flight,
// and RemoveMember and DeleteCap leave held slots alone (the leader
// releases them).
//
// The zero value is an empty State ready to use; New is the same. A State
// is safe for concurrent use; Apply and Restore exclude every other method.
type State struct {
	mu       sync.RWMutex
	applied  uint64
	limits   map[string]Limit
	horizons map[string]time.Duration
	members  map[string]Member
	pauses   map[string]time.Duration // never holds 0: SetPause{For: 0} deletes
	caps     map[string]int
	slots    map[string]Slot // by ID; Keys slices are never modified once stored
	quotas   map[string]QuotaCount
	// templates: the keys of limits that are templates, most specific
	// first (template.go); derived from limits, never encoded.
	templates []string
}

// Slot is one held concurrency slot, as AcquireSlots recorded it.
type Slot struct {
	Holder string        // node id of the member holding the slot
	Keys   []string      // the keys it counts against, in the order of the command
	TTL    time.Duration // measured from each replica's apply: see State
}

// HeldSlot is a Slot with its ID, as State.Slots lists them.
type HeldSlot struct {
	ID string
	Slot
}

// New returns an empty State.
func New() *State {
	return &State{
		limits:   map[string]Limit{},
		horizons: map[string]time.Duration{},
		members:  map[string]Member{},
		pauses:   map[string]time.Duration{},
		caps:     map[string]int{},
		slots:    map[string]Slot{},
		quotas:   map[string]QuotaCount{},
	}
}

// Apply applies the command c, committed at raft log index index. index
// must be above AppliedIndex (ErrStaleIndex otherwise). c is validated
// again although Encode and Decode already did (defence in depth): an
// invalid command is rejected with an error wrapping ErrInvalidCommand and
// the field's sentinel. A rejected command changes nothing, not even
// AppliedIndex. DeleteLimit of a key with no limit, RemoveMember of an
// unknown id, SetPause{For: 0} of a key with no pause, DeleteCap of a key
// with no cap, AcquireSlots of an ID already held and ReleaseSlots of ids
// not held succeed and change only AppliedIndex. Apply does not enforce
// caps (see State).
func (s *State) Apply(index uint64, c Command) error {
	c, err := checkCommand(c)
	if err != nil {
		return fmt.Errorf("fsm: apply index %d: %w", index, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.applied {
		return fmt.Errorf("fsm: apply %s at index %d: %w %d", commandName(c.commandType()), index, ErrStaleIndex, s.applied)
	}
	s.init()
	switch c := c.(type) {
	case SetLimit:
		_, had := s.limits[c.Key]
		s.limits[c.Key] = c.Limit
		if !had && IsTemplate(c.Key) {
			s.indexTemplates()
		}
	case DeleteLimit:
		_, had := s.limits[c.Key]
		delete(s.limits, c.Key) // the horizon stays: see State
		if had && IsTemplate(c.Key) {
			s.indexTemplates()
		}
	case ExtendHorizons:
		for _, e := range c.Entries {
			if e.Ahead == 0 {
				delete(s.horizons, e.Key) // forgotten: see State
			} else {
				s.horizons[e.Key] = e.Ahead // overwrite, not max: see State
			}
		}
	case UpsertMember:
		m := c.Member
		if m.Fraction == 0 {
			m.Fraction = 0 // -0 becomes +0, so equal states encode equally
		}
		s.members[m.ID] = m
	case RemoveMember:
		delete(s.members, c.ID)
	case SetPause:
		if c.For == 0 {
			delete(s.pauses, c.Key) // so equal states encode equally
		} else {
			s.pauses[c.Key] = c.For // overwrite, not max: see State
		}
	case SetCap:
		s.caps[c.Key] = c.Max
	case DeleteCap:
		delete(s.caps, c.Key)
	case AcquireSlots:
		if _, held := s.slots[c.ID]; !held { // a retry changes nothing: see State
			s.slots[c.ID] = Slot{Holder: c.Holder, Keys: slices.Clone(c.Keys), TTL: c.TTL}
		}
	case ReleaseSlots:
		for _, id := range c.IDs {
			delete(s.slots, id)
		}
	case CommitQuotas:
		for _, e := range c.Entries {
			s.applyQuota(e)
		}
	}
	s.applied = index
	return nil
}

// init allocates the maps of a zero State. Callers hold s.mu for writing.
func (s *State) init() {
	if s.limits == nil {
		s.limits = map[string]Limit{}
	}
	if s.horizons == nil {
		s.horizons = map[string]time.Duration{}
	}
	if s.members == nil {
		s.members = map[string]Member{}
	}
	if s.pauses == nil {
		s.pauses = map[string]time.Duration{}
	}
	if s.caps == nil {
		s.caps = map[string]int{}
	}
	if s.slots == nil {
		s.slots = map[string]Slot{}
	}
	if s.quotas == nil {
		s.quotas = map[string]QuotaCount{}
	}
}

// Limit returns the limit of key and whether it has one: its own, else
// that of the most specific template covering it (see Wildcard). A
// template's key gets the template's own limit.
func (s *State) Limit(key string) (Limit, bool) {
	l, _, ok := s.LimitFrom(key)
	return l, ok
}

// Limits returns a copy of every limit by key, templates included (keys
// that get their limit from a template are not listed).
func (s *State) Limits() map[string]Limit {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return copyMap(s.limits)
}

// Horizon returns the committed horizon of key (the Ahead of the latest
// ExtendHorizons entry that named it) and whether it has one. A key keeps
// its horizon after DeleteLimit.
func (s *State) Horizon(key string) (time.Duration, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.horizons[key]
	return d, ok
}

// HorizonCount is how many keys have a committed horizon.
func (s *State) HorizonCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.horizons)
}

// Horizons returns a copy of every committed horizon by key.
func (s *State) Horizons() map[string]time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return copyMap(s.horizons)
}

// Members returns a copy of the members, sorted by ID.
func (s *State) Members() []Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedMembers(s.members)
}

// Pause returns the refusal pause of key (the For of the latest SetPause
// that named it, measured by the node from when it applied that entry) and
// whether it has one.
func (s *State) Pause(key string) (time.Duration, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.pauses[key]
	return d, ok
}

// Pauses returns a copy of every refusal pause by key.
func (s *State) Pauses() map[string]time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return copyMap(s.pauses)
}

// Cap returns the concurrency cap of key and whether it has one.
func (s *State) Cap(key string) (int, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.caps[key]
	return n, ok
}

// Caps returns a copy of every concurrency cap by key.
func (s *State) Caps() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return copyMap(s.caps)
}

// Slot returns the held slot id and whether it is held. Its Keys are a
// copy the caller may change.
func (s *State) Slot(id string) (Slot, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sl, ok := s.slots[id]
	if !ok {
		return Slot{}, false
	}
	sl.Keys = slices.Clone(sl.Keys)
	return sl, true
}

// Slots returns a copy of every held slot, sorted by ID, expired or not
// (State has no clock: see State).
func (s *State) Slots() []HeldSlot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]HeldSlot, 0, len(s.slots))
	for id, sl := range s.slots {
		sl.Keys = slices.Clone(sl.Keys)
		out = append(out, HeldSlot{ID: id, Slot: sl})
	}
	slices.SortFunc(out, func(a, b HeldSlot) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// AppliedIndex returns the log index of the last command applied, or of the
// last command applied before the snapshot last restored; 0 for a new State.
func (s *State) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

func copyMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	maps.Copy(out, m)
	return out
}

func sortedMembers(m map[string]Member) []Member {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}
