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
// key, the committed horizon of each key, the members and the index of the
// last applied log entry.
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
// DeleteLimit removes a key's limit but keeps its horizon, so that a key
// deleted and created again cannot be granted slots that overlap ones
// granted before the delete.
//
// The zero value is an empty State ready to use; New is the same. A State
// is safe for concurrent use; Apply and Restore exclude every other method.
type State struct {
	mu       sync.RWMutex
	applied  uint64
	limits   map[string]Limit
	horizons map[string]time.Duration
	members  map[string]Member
}

// New returns an empty State.
func New() *State {
	return &State{
		limits:   map[string]Limit{},
		horizons: map[string]time.Duration{},
		members:  map[string]Member{},
	}
}

// Apply applies the command c, committed at raft log index index. index
// must be above AppliedIndex (ErrStaleIndex otherwise). c is validated
// again although Encode and Decode already did (defence in depth): an
// invalid command is rejected with an error wrapping ErrInvalidCommand and
// the field's sentinel. A rejected command changes nothing, not even
// AppliedIndex. DeleteLimit of a key with no limit and RemoveMember of an
// unknown id succeed and change only AppliedIndex.
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
		s.limits[c.Key] = c.Limit
	case DeleteLimit:
		delete(s.limits, c.Key) // the horizon stays: see State
	case ExtendHorizons:
		for _, e := range c.Entries {
			s.horizons[e.Key] = e.Ahead // overwrite, not max: see State
		}
	case UpsertMember:
		m := c.Member
		if m.Fraction == 0 {
			m.Fraction = 0 // -0 becomes +0, so equal states encode equally
		}
		s.members[m.ID] = m
	case RemoveMember:
		delete(s.members, c.ID)
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
}

// Limit returns the limit of key and whether it has one.
func (s *State) Limit(key string) (Limit, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.limits[key]
	return l, ok
}

// Limits returns a copy of every limit by key.
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
