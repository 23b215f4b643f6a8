// Package apply is a raftpace node's raft.FSM: it applies every committed
// command to the replicated state (package fsm) and, beside it, keeps what
// needs this host's clock, which the deterministic state cannot read.
//
// # What it promises
//
// Every key's horizon is measured from when this node applied (or restored)
// the entry that set it: the node's own apply time plus the entry's Ahead.
// The latest ExtendHorizons entry overwrites a key's horizon, so a leader
// handing over can commit its exact cursors. Held concurrency slots expire
// TTL after this node applied them, and pauses end their duration after
// this node applied them; a restored snapshot counts as applied now, so
// what it holds can only last longer than it did anywhere else. Applied
// returns a channel closed at the next apply, Slots one closed at the next
// change of the held slots, so callers wait without polling. The callbacks
// (OnLimit, OnReset, OnMembers, OnGate) are told of each change after the
// adapter's lock is released.
//
// # What it may depend on
//
// Package fsm (the commands and the state) and hashicorp/raft (the FSM
// interface). It does not import node: its node gives it the state, a
// clock, and the table the applied pauses are written to (Pauses).
package apply

import (
	"io"
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
)

// Adapter is the raft.FSM of a node. It applies commands to the
// deterministic fsm.State and, beside it, keeps what needs this host's clock:
// the local horizon of every key, measured from when this node applied (or
// restored) the entry that set it. The fsm package cannot do that, since Apply
// there reads no clock.
//
// Why apply time is safe: a leader proposes an extension at time q and uses
// it as q+Ahead; every other node applies the entry at some a >= q (it cannot
// apply what was not yet proposed), so a+Ahead >= q+Ahead. A node that later
// leads therefore starts each key at or after the old leader's horizon,
// measured with durations on one host's monotonic clock; no cross-host wall
// clock is read. A restored snapshot counts as applied now, later still.
//
// Set the callbacks before raft starts applying.
type Adapter struct {
	state *fsm.State
	now   func() int64 // node's monotonic nanoseconds
	// OnLimit is told of the key of every limit change (a template's
	// covers many keys: fsm.Wildcard) so the pacer can follow without
	// polling; after a restore, OnReset is told instead.
	OnLimit func(key string)
	// OnReset is told when a snapshot replaced the whole state.
	OnReset func()
	// OnMembers is told when the member list (or a fraction) changed.
	OnMembers func()
	// OnGate is told when a cap or a pause changed (the checkpoint follows).
	OnGate func()

	mu       sync.Mutex
	horizons map[string]int64 // key -> local monotonic ns
	applied  chan struct{}    // closed and replaced after every apply
	// slots: every held concurrency slot, expiring TTL after this node
	// applied (or restored) it; slotsCh is closed and replaced when one is
	// taken or given back.
	slots   map[string]HeldSlot
	slotsCh chan struct{}
	// pauses: key -> local monotonic ns when its pause ends (the latest
	// SetPause entry, measured from this node's apply of it).
	pauses Pauses
}

// Pauses is the table the applied pauses are written to: key -> local
// monotonic ns when its pause ends. Update applies f to the table (a
// node's gate.Deadlines: readers see the result at once, without a lock).
type Pauses interface {
	Update(f func(m map[string]int64))
}

// HeldSlot is a concurrency slot as this node measures it.
type HeldSlot struct {
	Holder  string
	Keys    []string
	Expires int64 // local monotonic ns
}

// New returns the adapter of state, measuring with now (the node's
// monotonic nanoseconds) and writing the applied pauses to pauses.
func New(state *fsm.State, now func() int64, pauses Pauses) *Adapter {
	return &Adapter{
		state:     state,
		now:       now,
		OnLimit:   func(string) {},
		OnReset:   func() {},
		OnMembers: func() {},
		OnGate:    func() {},
		horizons:  make(map[string]int64),
		applied:   make(chan struct{}),
		slots:     make(map[string]HeldSlot),
		slotsCh:   make(chan struct{}),
		pauses:    pauses,
	}
}

// Apply implements raft.FSM. It returns nil or the error the state returned;
// every node returns the same, since the state is deterministic.
func (f *Adapter) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	cmd, err := fsm.Decode(l.Data)
	if err == nil {
		err = f.state.Apply(l.Index, cmd)
	}
	now := f.now()
	f.mu.Lock()
	if err == nil {
		switch c := cmd.(type) {
		case fsm.ExtendHorizons:
			// Overwrite, not max (fsm.State explains why the latest entry
			// alone covers every grant): so a leader handing over can commit
			// its exact cursors and its successor starts there, not up to
			// HorizonAhead later.
			for _, e := range c.Entries {
				if e.Ahead == 0 {
					delete(f.horizons, e.Key) // an idle key forgotten
				} else {
					f.horizons[e.Key] = now + int64(e.Ahead)
				}
			}
		case fsm.SetPause:
			f.setPause(c.Key, now, c.For)
		case fsm.AcquireSlots:
			// A second entry for a held ID (a retried request) renews it:
			// measured from this apply, it still ends after the holder's
			// deadline, which is measured from the first request.
			f.slots[c.ID] = HeldSlot{Holder: c.Holder, Keys: c.Keys, Expires: now + int64(c.TTL)}
			f.slotsChangedLocked()
		case fsm.ReleaseSlots:
			for _, id := range c.IDs {
				delete(f.slots, id)
			}
			f.slotsChangedLocked()
		}
	}
	close(f.applied)
	f.applied = make(chan struct{})
	f.mu.Unlock()
	if err == nil {
		switch c := cmd.(type) {
		case fsm.SetLimit:
			f.OnLimit(c.Key)
		case fsm.DeleteLimit:
			f.OnLimit(c.Key)
		case fsm.UpsertMember, fsm.RemoveMember:
			f.OnMembers()
		case fsm.SetCap, fsm.DeleteCap, fsm.SetPause:
			f.OnGate()
		}
	}
	return err
}

// Snapshot implements raft.FSM.
func (f *Adapter) Snapshot() (raft.FSMSnapshot, error) {
	return f.state.Snapshot(), nil
}

// Restore implements raft.FSM: the state is replaced and every horizon in it
// counts as applied now.
func (f *Adapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.state.Restore(rc); err != nil {
		return err
	}
	now := f.now()
	f.mu.Lock()
	for key, ahead := range f.state.Horizons() {
		if h := now + int64(ahead); h > f.horizons[key] {
			f.horizons[key] = h
		}
	}
	// Pauses and slots restored count from now: later than they were
	// measured anywhere else, so they can only last longer.
	f.pauses.Update(func(m map[string]int64) {
		clear(m)
		for key, d := range f.state.Pauses() {
			m[key] = now + int64(d)
		}
	})
	f.slots = make(map[string]HeldSlot)
	for _, s := range f.state.Slots() {
		f.slots[s.ID] = HeldSlot{Holder: s.Holder, Keys: s.Keys, Expires: now + int64(s.TTL)}
	}
	f.slotsChangedLocked()
	close(f.applied)
	f.applied = make(chan struct{})
	f.mu.Unlock()
	f.OnReset()
	f.OnMembers()
	return nil
}

// Horizon returns the key's local horizon as this node measured it.
func (f *Adapter) Horizon(key string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.horizons[key]
	return h, ok
}

// Applied returns a channel closed at the next apply, for waiting on the
// applied index without polling.
func (f *Adapter) Applied() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// setPause records key's pause as ending d past now (d == 0 clears it).
// The latest entry overwrites: the leader proposes the maximum of every
// hint it has seen (see Node.Pause).
func (f *Adapter) setPause(key string, now int64, d time.Duration) {
	f.pauses.Update(func(m map[string]int64) {
		if d == 0 {
			delete(m, key)
		} else {
			m[key] = now + int64(d)
		}
	})
}

func (f *Adapter) slotsChangedLocked() {
	close(f.slotsCh)
	f.slotsCh = make(chan struct{})
}

// Slots returns a copy of the held slots and a channel closed at the
// next change.
func (f *Adapter) Slots() (map[string]HeldSlot, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.slots), f.slotsCh
}
