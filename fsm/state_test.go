package fsm

import (
	"math"
	"reflect"
	"sync"
	"testing"
	"time"
)

// step is one Apply in a table-driven run: the command at index, and the
// sentinels its error must wrap (none: must succeed).
type step struct {
	index uint64
	cmd   Command
	want  []error
}

// run applies steps in order to s, checking each outcome; a failing step
// must leave the state exactly as it was.
func run(t *testing.T, s *State, steps []step) {
	t.Helper()
	for i, st := range steps {
		before := snapshotBytes(t, s)
		err := s.Apply(st.index, st.cmd)
		if st.want == nil {
			if err != nil {
				t.Fatalf("step %d: Apply(%d, %#v) = %v", i, st.index, st.cmd, err)
			}
			if got := s.AppliedIndex(); got != st.index {
				t.Fatalf("step %d: AppliedIndex = %d, want %d", i, got, st.index)
			}
			continue
		}
		checkErr(t, err, st.want, "fsm: apply")
		if after := snapshotBytes(t, s); string(after) != string(before) {
			t.Fatalf("step %d: rejected Apply(%d, %#v) changed the state", i, st.index, st.cmd)
		}
	}
}

func lim(rate float64, burst int) Limit { return Limit{Rate: rate, Burst: burst} }

func horizons(es ...HorizonEntry) ExtendHorizons { return ExtendHorizons{Entries: es} }

func TestState_ApplyLimits(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetLimit{Key: "a", Limit: lim(10, 5)}, nil},
		{2, SetLimit{Key: "b", Limit: lim(1, 1)}, nil},
		{3, SetLimit{Key: "a", Limit: lim(20, 1)}, nil}, // overwrite
		{5, DeleteLimit{Key: "b"}, nil},                 // gaps in the index are fine
		{6, DeleteLimit{Key: "never-set"}, nil},         // no-op, index still moves
	})
	if l, ok := s.Limit("a"); !ok || l != lim(20, 1) {
		t.Errorf("Limit(a) = %v, %v; want %v, true", l, ok, lim(20, 1))
	}
	if _, ok := s.Limit("b"); ok {
		t.Error("Limit(b) still set after DeleteLimit")
	}
	if got, want := s.Limits(), map[string]Limit{"a": lim(20, 1)}; !reflect.DeepEqual(got, want) {
		t.Errorf("Limits = %v, want %v", got, want)
	}
	if got := s.AppliedIndex(); got != 6 {
		t.Errorf("AppliedIndex = %d, want 6", got)
	}
	// Limits is a copy.
	s.Limits()["a"] = lim(1, 1)
	if l, _ := s.Limit("a"); l != lim(20, 1) {
		t.Errorf("writing to the Limits map changed the state: %v", l)
	}
}

func TestState_ApplyHorizons(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetLimit{Key: "a", Limit: lim(10, 5)}, nil},
		{2, horizons(HorizonEntry{"a", 10 * time.Second}, HorizonEntry{"b", time.Second}), nil},
		// The latest entry wins even when smaller: overwrite, not max.
		{3, horizons(HorizonEntry{"a", 2 * time.Second}), nil},
		// A key without a limit may have a horizon.
		{4, horizons(HorizonEntry{"c", time.Minute}), nil},
	})
	want := map[string]time.Duration{"a": 2 * time.Second, "b": time.Second, "c": time.Minute}
	if got := s.Horizons(); !reflect.DeepEqual(got, want) {
		t.Errorf("Horizons = %v, want %v", got, want)
	}
	if d, ok := s.Horizon("a"); !ok || d != 2*time.Second {
		t.Errorf("Horizon(a) = %v, %v; want 2s, true", d, ok)
	}
	if _, ok := s.Horizon("zzz"); ok {
		t.Error("Horizon(zzz) found")
	}
	s.Horizons()["a"] = time.Hour
	if d, _ := s.Horizon("a"); d != 2*time.Second {
		t.Errorf("writing to the Horizons map changed the state: %v", d)
	}
}

func TestState_DeleteKeepsHorizon(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetLimit{Key: "a", Limit: lim(10, 5)}, nil},
		{2, horizons(HorizonEntry{"a", 3 * time.Second}), nil},
		{3, DeleteLimit{Key: "a"}, nil},
	})
	if _, ok := s.Limit("a"); ok {
		t.Fatal("limit survived DeleteLimit")
	}
	if d, ok := s.Horizon("a"); !ok || d != 3*time.Second {
		t.Fatalf("Horizon(a) after DeleteLimit = %v, %v; want 3s, true", d, ok)
	}
	// Re-creating the key finds the old horizon still there.
	mustApply(t, s, 4, SetLimit{Key: "a", Limit: lim(1, 1)})
	if d, ok := s.Horizon("a"); !ok || d != 3*time.Second {
		t.Fatalf("Horizon(a) after re-create = %v, %v; want 3s, true", d, ok)
	}
}

func TestState_ApplyMembers(t *testing.T) {
	s := New()
	n1 := Member{ID: "n1", Addr: "10.0.0.1:7000", Fraction: 0.5}
	n2 := Member{ID: "n2", Addr: "10.0.0.2:7000", Fraction: 0.25}
	n0 := Member{ID: "n0", Addr: "10.0.0.9:7000", Fraction: math.Copysign(0, -1)}
	run(t, s, []step{
		{1, UpsertMember{Member: n2}, nil},
		{2, UpsertMember{Member: n1}, nil},
		{3, UpsertMember{Member: Member{ID: "n2", Addr: "10.0.0.3:7001", Fraction: 0.5}}, nil}, // replace
		{4, UpsertMember{Member: n0}, nil},
		{5, RemoveMember{ID: "n1"}, nil},
		{6, RemoveMember{ID: "nobody"}, nil},
	})
	want := []Member{
		{ID: "n0", Addr: "10.0.0.9:7000", Fraction: 0},
		{ID: "n2", Addr: "10.0.0.3:7001", Fraction: 0.5},
	}
	got := s.Members()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Members = %v, want %v", got, want)
	}
	if math.Signbit(got[0].Fraction) {
		t.Error("a -0 fraction was stored as -0, want +0")
	}
	got[0].Addr = "changed:1"
	if s.Members()[0].Addr != "10.0.0.9:7000" {
		t.Error("writing to the Members slice changed the state")
	}
}

func TestState_ApplyPauses(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetPause{Key: "a", For: time.Minute}, nil},
		{2, SetPause{Key: "b", For: time.Second}, nil},
		// The latest entry wins even when smaller: overwrite, not max.
		{3, SetPause{Key: "a", For: 5 * time.Second}, nil},
		// For 0 clears the pause; clearing a key without one is a no-op.
		{4, SetPause{Key: "b", For: 0}, nil},
		{5, SetPause{Key: "never-paused", For: 0}, nil},
		{6, &SetPause{Key: "c", For: MaxPause}, nil},
		// A pause is independent of the key's limit.
		{7, SetLimit{Key: "a", Limit: lim(1, 1)}, nil},
		{8, DeleteLimit{Key: "a"}, nil},
	})
	want := map[string]time.Duration{"a": 5 * time.Second, "c": MaxPause}
	if got := s.Pauses(); !reflect.DeepEqual(got, want) {
		t.Errorf("Pauses = %v, want %v", got, want)
	}
	if d, ok := s.Pause("a"); !ok || d != 5*time.Second {
		t.Errorf("Pause(a) = %v, %v; want 5s, true", d, ok)
	}
	if d, ok := s.Pause("b"); ok {
		t.Errorf("Pause(b) = %v after SetPause{For: 0}, want none", d)
	}
	s.Pauses()["a"] = time.Hour
	if d, _ := s.Pause("a"); d != 5*time.Second {
		t.Errorf("writing to the Pauses map changed the state: %v", d)
	}
	// A cleared pause leaves no trace: the state equals one that never had it.
	a, b := New(), New()
	mustApply(t, a, 1, SetPause{Key: "k", For: time.Second})
	mustApply(t, a, 2, SetPause{Key: "k", For: 0})
	mustApply(t, b, 2, DeleteCap{Key: "k"})
	assertSameState(t, a, b)
}

func TestState_ApplyCaps(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetCap{Key: "a", Max: 10}, nil},
		{2, SetCap{Key: "b", Max: 1}, nil},
		{3, SetCap{Key: "a", Max: 3}, nil}, // replace, even with a smaller cap
		{4, DeleteCap{Key: "b"}, nil},
		{5, DeleteCap{Key: "never-capped"}, nil},
		{6, &SetCap{Key: "c", Max: MaxCap}, nil},
	})
	want := map[string]int{"a": 3, "c": MaxCap}
	if got := s.Caps(); !reflect.DeepEqual(got, want) {
		t.Errorf("Caps = %v, want %v", got, want)
	}
	if n, ok := s.Cap("a"); !ok || n != 3 {
		t.Errorf("Cap(a) = %v, %v; want 3, true", n, ok)
	}
	if n, ok := s.Cap("b"); ok {
		t.Errorf("Cap(b) = %v after DeleteCap, want none", n)
	}
	s.Caps()["a"] = 99
	if n, _ := s.Cap("a"); n != 3 {
		t.Errorf("writing to the Caps map changed the state: %v", n)
	}
}

func TestState_ApplySlots(t *testing.T) {
	s := New()
	keys := []string{"a", "b"}
	run(t, s, []step{
		{1, SetCap{Key: "a", Max: 1}, nil},
		{2, AcquireSlots{ID: "s1", Holder: "n1", Keys: keys, TTL: time.Minute}, nil},
		// Apply does not enforce caps: the leader does (see State).
		{3, AcquireSlots{ID: "s2", Holder: "n2", Keys: []string{"a"}, TTL: time.Second}, nil},
		// A retry of s1 with other fields changes nothing but the index.
		{4, AcquireSlots{ID: "s1", Holder: "n9", Keys: []string{"z"}, TTL: time.Hour}, nil},
		// Neither the holder nor a key needs to exist.
		{5, &AcquireSlots{ID: "s3", Holder: "gone", Keys: []string{"no-cap"}, TTL: MaxSlotTTL}, nil},
		// Unknown ids are ignored.
		{6, ReleaseSlots{IDs: []string{"s2", "never-held"}}, nil},
		{7, ReleaseSlots{IDs: []string{"s2"}}, nil},
		// Deleting a cap or a member leaves the slots alone.
		{8, DeleteCap{Key: "a"}, nil},
		{9, RemoveMember{ID: "n1"}, nil},
	})
	if got := s.AppliedIndex(); got != 9 {
		t.Errorf("AppliedIndex = %d, want 9", got)
	}
	want := []HeldSlot{
		{ID: "s1", Slot: Slot{Holder: "n1", Keys: []string{"a", "b"}, TTL: time.Minute}},
		{ID: "s3", Slot: Slot{Holder: "gone", Keys: []string{"no-cap"}, TTL: MaxSlotTTL}},
	}
	if got := s.Slots(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Slots = %v, want %v", got, want)
	}
	if sl, ok := s.Slot("s1"); !ok || !reflect.DeepEqual(sl, want[0].Slot) {
		t.Errorf("Slot(s1) = %v, %v; want %v, true", sl, ok, want[0].Slot)
	}
	if sl, ok := s.Slot("s2"); ok {
		t.Errorf("Slot(s2) = %v after ReleaseSlots, want none", sl)
	}

	// The state keeps its own copy of Keys: neither the command's slice
	// nor the slices the accessors return reach it.
	keys[0] = "changed"
	sl, _ := s.Slot("s1")
	sl.Keys[1] = "changed"
	s.Slots()[0].Keys[0] = "changed"
	if got := s.Slots(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after writing to Keys slices: Slots = %v, want %v", got, want)
	}

	mustApply(t, s, 10, ReleaseSlots{IDs: []string{"s3", "s1"}})
	if got := s.Slots(); len(got) != 0 {
		t.Errorf("Slots after releasing all = %v, want none", got)
	}
	// A released id may be acquired again.
	mustApply(t, s, 11, AcquireSlots{ID: "s1", Holder: "n2", Keys: []string{"c"}, TTL: 1})
	if sl, ok := s.Slot("s1"); !ok || sl.Holder != "n2" {
		t.Errorf("Slot(s1) after re-acquire = %v, %v; want holder n2", sl, ok)
	}
}

func TestState_ApplyRejects(t *testing.T) {
	s := New()
	run(t, s, []step{
		{1, SetLimit{Key: "a", Limit: lim(10, 5)}, nil},
		{2, horizons(HorizonEntry{"a", time.Second}), nil},
		{3, UpsertMember{Member: Member{ID: "n1", Addr: "h:1"}}, nil},
		// Invalid commands: an error, and nothing changes, not the index either.
		{4, SetLimit{Key: "a", Limit: lim(math.NaN(), 5)}, []error{ErrInvalidCommand, ErrInvalidLimit}},
		{4, SetLimit{Key: "", Limit: lim(1, 1)}, []error{ErrInvalidCommand, ErrInvalidKey}},
		{4, DeleteLimit{Key: "a\nb"}, []error{ErrInvalidCommand, ErrInvalidKey}},
		{4, horizons(), []error{ErrInvalidCommand}},
		{4, horizons(HorizonEntry{"a", -1}), []error{ErrInvalidCommand}},
		{4, horizons(HorizonEntry{"a", 2 * time.Hour}), []error{ErrInvalidCommand}},
		{4, horizons(HorizonEntry{"a", 1}, HorizonEntry{"a", 2}), []error{ErrInvalidCommand}},
		{4, UpsertMember{Member: Member{ID: "n1", Addr: "h:1", Fraction: 1.01}}, []error{ErrInvalidCommand, ErrInvalidMember}},
		{4, RemoveMember{ID: ""}, []error{ErrInvalidCommand, ErrInvalidID}},
		{4, SetPause{Key: "a", For: -time.Second}, []error{ErrInvalidCommand}},
		{4, SetPause{Key: "a", For: MaxPause + 1}, []error{ErrInvalidCommand}},
		{4, SetCap{Key: "a", Max: 0}, []error{ErrInvalidCommand}},
		{4, SetCap{Key: "", Max: 1}, []error{ErrInvalidCommand, ErrInvalidKey}},
		{4, DeleteCap{Key: ""}, []error{ErrInvalidCommand, ErrInvalidKey}},
		{4, AcquireSlots{ID: "s", Holder: "n1", Keys: []string{"a", "a"}, TTL: 1}, []error{ErrInvalidCommand}},
		{4, AcquireSlots{ID: "s", Holder: "", Keys: []string{"a"}, TTL: 1}, []error{ErrInvalidCommand, ErrInvalidID}},
		{4, AcquireSlots{ID: "s", Holder: "n1", Keys: []string{"a"}, TTL: MaxSlotTTL + 1}, []error{ErrInvalidCommand}},
		{4, ReleaseSlots{}, []error{ErrInvalidCommand}},
		{4, ReleaseSlots{IDs: []string{"s", "s"}}, []error{ErrInvalidCommand}},
		{4, (*AcquireSlots)(nil), []error{ErrInvalidCommand}},
		{4, nil, []error{ErrInvalidCommand}},
		{4, (*DeleteLimit)(nil), []error{ErrInvalidCommand}},
		// Stale or repeated index.
		{3, SetLimit{Key: "b", Limit: lim(1, 1)}, []error{ErrStaleIndex}},
		{1, DeleteLimit{Key: "a"}, []error{ErrStaleIndex}},
		// And afterwards everything still works.
		{4, &DeleteLimit{Key: "a"}, nil},
	})
	if _, ok := s.Limit("a"); ok {
		t.Error("pointer DeleteLimit not applied")
	}
	checkErr(t, New().Apply(0, DeleteLimit{Key: "a"}), []error{ErrStaleIndex}, "index 0", "applied index 0")
}

// TestState_ZeroValue checks that a zero State works like New().
func TestState_ZeroValue(t *testing.T) {
	var s State
	if s.Limits() == nil || s.Horizons() == nil || s.Pauses() == nil || s.Caps() == nil {
		t.Error("copies of a zero State are nil maps")
	}
	if len(s.Members()) != 0 || len(s.Slots()) != 0 || s.AppliedIndex() != 0 {
		t.Error("zero State not empty")
	}
	if _, ok := s.Slot("s"); ok {
		t.Error("zero State holds a slot")
	}
	cmds := []Command{
		SetLimit{Key: "a", Limit: lim(1, 1)},
		horizons(HorizonEntry{"a", 1}),
		UpsertMember{Member: Member{ID: "n", Addr: "h:1"}},
		SetPause{Key: "a", For: 1},
		SetCap{Key: "a", Max: 1},
		AcquireSlots{ID: "s", Holder: "n", Keys: []string{"a"}, TTL: 1},
	}
	// Each kind of command must work as the first on a zero State.
	for _, c := range cmds {
		var z State
		mustApply(t, &z, 1, c)
	}
	want := New()
	for i, c := range cmds {
		mustApply(t, &s, uint64(i+1), c)
		mustApply(t, want, uint64(i+1), c)
	}
	assertSameState(t, &s, want)
}

// TestState_Deterministic applies the same random commands to two States
// and checks they agree after every step.
func TestState_Deterministic(t *testing.T) {
	rng := newRand(4)
	pool := []string{"a", "b", "c", "d"}
	a, b := New(), New()
	for i := range uint64(2000) {
		c := randCommand(rng, pool)
		mustApply(t, a, i+1, c)
		mustApply(t, b, i+1, c)
		if i%100 == 0 {
			assertSameState(t, a, b)
		}
	}
	assertSameState(t, a, b)
}

// TestState_Concurrent exercises the lock under the race detector.
func TestState_Concurrent(t *testing.T) {
	s := New()
	rng := newRand(5)
	cmds := make([]Command, 500)
	for i := range cmds {
		cmds[i] = randCommand(rng, []string{"a", "b"})
	}
	snap := snapshotBytes(t, randState(t, rng, 50))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.Limit("a")
				s.Limits()
				s.Horizon("a")
				s.Horizons()
				s.Members()
				s.Pause("a")
				s.Pauses()
				s.Cap("a")
				s.Caps()
				s.Slot("slot-1")
				s.Slots()
				s.AppliedIndex()
				if _, err := s.Snapshot().WriteTo(discard{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i, c := range cmds {
		if i == len(cmds)/2 {
			if err := s.Restore(bytesReader(snap)); err != nil {
				t.Error(err)
			}
		}
		// After the restore the index continues above the snapshot's.
		if err := s.Apply(1_000_000+uint64(i), c); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}
