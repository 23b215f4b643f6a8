package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// memBackend is an in-memory Backend. Its Reserve grants at once but
// honours pauses as the node does: it waits a pause out, or returns a
// *raftpace.PausedError if the pause outlasts maxWait. Slots obey caps. It
// records the calls the tests look at.
type memBackend struct {
	mu     sync.Mutex
	limits map[string]fsm.Limit
	caps   map[string]int
	pauses map[string]time.Time     // key -> end
	held   map[string]raftpace.Slot // id -> slot
	seq    int

	reserveErr error // returned by Reserve when set
	pauseErr   error // returned by Pause when set
	// onSetLimit and onSetCap, when set, replace what is stored (a
	// concurrent registration winning).
	onSetLimit func(key string, lim fsm.Limit) fsm.Limit
	onSetCap   func(key string, max int) int

	calls       []string // "reserve k", "acquire [k]", "release id", "pause k"
	pauseCalls  []pauseCall
	acquired    []raftpace.Slot
	acquireWait []time.Duration
	released    map[string]int // id -> ReleaseSlot calls
	releaseCtx  []releaseCtx
	setLimits   int
	setCaps     int
	capLookups  int
}

type pauseCall struct {
	key string
	d   time.Duration
}

type releaseCtx struct {
	err         error
	hasDeadline bool
	left        time.Duration
}

func newMem() *memBackend {
	return &memBackend{
		limits:   map[string]fsm.Limit{},
		caps:     map[string]int{},
		pauses:   map[string]time.Time{},
		held:     map[string]raftpace.Slot{},
		released: map[string]int{},
	}
}

func (m *memBackend) record(s string) {
	m.calls = append(m.calls, s)
}

func (m *memBackend) ReserveAll(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error) {
	key := wants[0].Key // the transport reserves one key at a time
	m.mu.Lock()
	m.record("reserve " + key)
	if m.reserveErr != nil {
		err := m.reserveErr
		m.mu.Unlock()
		return raftpace.Reservation{}, err
	}
	end := m.pauses[key]
	m.mu.Unlock()
	if p := time.Until(end); p > 0 {
		if p > maxWait {
			return raftpace.Reservation{}, &raftpace.PausedError{Key: key, Remaining: p, MaxWait: maxWait}
		}
		t := time.NewTimer(p)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return raftpace.Reservation{}, ctx.Err()
		}
	}
	now := time.Now()
	return raftpace.Reservation{At: now, UseBy: now.Add(time.Hour)}, nil
}

func (m *memBackend) Forfeit(raftpace.Reservation) {}

func (m *memBackend) SetLimit(_ context.Context, key string, lim fsm.Limit) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLimits++
	if m.onSetLimit != nil {
		lim = m.onSetLimit(key, lim)
	}
	m.limits[key] = lim
	return nil
}

func (m *memBackend) Limit(_ context.Context, key string) (fsm.Limit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.limits[key]
	if !ok {
		return fsm.Limit{}, fmt.Errorf("mem: limit %q: %w", key, raftpace.ErrUnknownKey)
	}
	return l, nil
}

func (m *memBackend) Remaining(_ context.Context, key string) (raftpace.Remaining, error) {
	return raftpace.Remaining{Key: key}, nil
}

func (m *memBackend) Limits(context.Context) (map[string]fsm.Limit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]fsm.Limit, len(m.limits))
	for k, v := range m.limits {
		out[k] = v
	}
	return out, nil
}

func (m *memBackend) Pause(_ context.Context, key string, d time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record("pause " + key)
	m.pauseCalls = append(m.pauseCalls, pauseCall{key, d})
	if m.pauseErr != nil {
		return 0, m.pauseErr
	}
	end := time.Now().Add(d)
	if end.After(m.pauses[key]) {
		m.pauses[key] = end
	}
	return time.Until(m.pauses[key]), nil
}

func (m *memBackend) PausedFor(key string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(time.Until(m.pauses[key]), 0)
}

// clearPauses lifts every pause (so a test can send again at once).
func (m *memBackend) clearPauses() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pauses)
}

func (m *memBackend) AcquireSlots(ctx context.Context, keys []string, ttl, maxWait time.Duration) (raftpace.Slot, error) {
	deadline := time.Now().Add(maxWait)
	for {
		m.mu.Lock()
		m.acquireWait = append(m.acquireWait, maxWait)
		var full []string
		for _, k := range keys {
			c, ok := m.caps[k]
			if !ok {
				m.mu.Unlock()
				return raftpace.Slot{}, fmt.Errorf("mem: acquire %q: %w", k, raftpace.ErrUnknownKey)
			}
			used := 0
			for _, s := range m.held {
				if slices.Contains(s.Keys, k) {
					used++
				}
			}
			if used >= c {
				full = append(full, k)
			}
		}
		if len(full) == 0 {
			m.seq++
			s := raftpace.Slot{ID: fmt.Sprintf("s%d", m.seq), Keys: slices.Clone(keys), Deadline: time.Now().Add(ttl)}
			m.held[s.ID] = s
			m.acquired = append(m.acquired, s)
			m.record(fmt.Sprintf("acquire %q", keys))
			m.mu.Unlock()
			return s, nil
		}
		m.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return raftpace.Slot{}, &raftpace.ConcurrencyLimitError{Keys: keys, Full: full, MaxWait: maxWait}
		}
		select {
		case <-time.After(min(left, 5*time.Millisecond)):
		case <-ctx.Done():
			if time.Now().Before(deadline) {
				return raftpace.Slot{}, ctx.Err()
			}
		}
	}
}

func (m *memBackend) ReleaseSlot(ctx context.Context, s raftpace.Slot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record("release " + s.ID)
	m.released[s.ID]++
	dl, ok := ctx.Deadline()
	m.releaseCtx = append(m.releaseCtx, releaseCtx{err: ctx.Err(), hasDeadline: ok, left: time.Until(dl)})
	delete(m.held, s.ID)
	return nil
}

func (m *memBackend) SetCap(_ context.Context, key string, max int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setCaps++
	if m.onSetCap != nil {
		max = m.onSetCap(key, max)
	}
	m.caps[key] = max
	return nil
}

func (m *memBackend) Cap(_ context.Context, key string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capLookups++
	c, ok := m.caps[key]
	if !ok {
		return 0, fmt.Errorf("mem: cap %q: %w", key, raftpace.ErrUnknownKey)
	}
	return c, nil
}

func (m *memBackend) Caps(context.Context) (map[string]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.caps))
	for k, v := range m.caps {
		out[k] = v
	}
	return out, nil
}

// snapshot returns copies of the recorded calls.
func (m *memBackend) snapshot() (calls []string, pauses []pauseCall, acquired []raftpace.Slot, released map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	released = make(map[string]int, len(m.released))
	for k, v := range m.released {
		released[k] = v
	}
	return slices.Clone(m.calls), slices.Clone(m.pauseCalls), slices.Clone(m.acquired), released
}

var _ Backend = (*memBackend)(nil)
