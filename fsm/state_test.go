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
		{4, horizons(HorizonEntry{"a", 0}), []error{ErrInvalidCommand}},
		{4, horizons(HorizonEntry{"a", 2 * time.Hour}), []error{ErrInvalidCommand}},
		{4, horizons(HorizonEntry{"a", 1}, HorizonEntry{"a", 2}), []error{ErrInvalidCommand}},
		{4, UpsertMember{Member: Member{ID: "n1", Addr: "h:1", Fraction: 1.01}}, []error{ErrInvalidCommand, ErrInvalidMember}},
		{4, RemoveMember{ID: ""}, []error{ErrInvalidCommand, ErrInvalidID}},
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
	if s.Limits() == nil || s.Horizons() == nil {
		t.Error("copies of a zero State are nil maps")
	}
	if len(s.Members()) != 0 || s.AppliedIndex() != 0 {
		t.Error("zero State not empty")
	}
	mustApply(t, &s, 1, SetLimit{Key: "a", Limit: lim(1, 1)})
	mustApply(t, &s, 2, horizons(HorizonEntry{"a", 1}))
	mustApply(t, &s, 3, UpsertMember{Member: Member{ID: "n", Addr: "h:1"}})
	want := New()
	mustApply(t, want, 1, SetLimit{Key: "a", Limit: lim(1, 1)})
	mustApply(t, want, 2, horizons(HorizonEntry{"a", 1}))
	mustApply(t, want, 3, UpsertMember{Member: Member{ID: "n", Addr: "h:1"}})
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
