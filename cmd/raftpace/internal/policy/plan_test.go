package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestDiff(t *testing.T) {
	var f File
	f.Limits = map[string]Limit{
		"same":    {Rate: 5, Burst: 2},
		"rate":    {Rate: 6, Burst: 2},
		"burst":   {Rate: 5, Burst: 3},
		"new":     {Rate: 1, Burst: 1},
		"default": {Rate: 1}, // burst left out: 1, as the cluster holds it
	}
	f.Caps = map[string]int{"c-same": 4, "c-more": 8, "c-new": 1}
	limits := map[string]fsm.Limit{
		"same": {Rate: 5, Burst: 2}, "rate": {Rate: 5, Burst: 2}, "burst": {Rate: 5, Burst: 2},
		"default": {Rate: 1, Burst: 1}, "other": {Rate: 9, Burst: 9},
	}
	caps := map[string]int{"c-same": 4, "c-more": 4, "c-other": 2}
	p := Diff(f, limits, caps)

	var got []string
	for _, ch := range p.Changes {
		s := ch.Key
		if ch.New() {
			s += " new"
		}
		got = append(got, s)
	}
	want := []string{"burst", "new new", "rate", "c-more", "c-new new"} // limits, then caps, by key
	if len(got) != len(want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("changes %q, want %q", got, want)
		}
	}
	if c := p.Changes[0]; c.Was != (fsm.Limit{Rate: 5, Burst: 2}) || c.Limit != (fsm.Limit{Rate: 5, Burst: 3}) {
		t.Errorf("burst change %+v", c)
	}
	if c := p.Changes[3]; c.WasMax != 4 || c.Max != 8 {
		t.Errorf("cap change %+v", c)
	}
	if p.Unchanged != 3 || p.Untouched != 2 {
		t.Errorf("unchanged %d untouched %d, want 3 (same, default, c-same) and 2 (other, c-other)", p.Unchanged, p.Untouched)
	}
}

// fakeSetter fails the keys in fail and records the rest.
type fakeSetter struct {
	fail     map[string]bool
	mu       sync.Mutex
	set      map[string]string
	inFlight atomic.Int32
	most     atomic.Int32
}

func (s *fakeSetter) call(ctx context.Context, key, what string) error {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(time.Millisecond) // let the requests overlap
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no timeout on the request")
	}
	if s.fail[key] {
		return errors.New("refused")
	}
	s.mu.Lock()
	s.set[key] = what
	s.mu.Unlock()
	return nil
}

func (s *fakeSetter) SetLimit(ctx context.Context, key string, lim fsm.Limit) error {
	return s.call(ctx, key, "limit")
}

func (s *fakeSetter) SetCap(ctx context.Context, key string, max int) error {
	return s.call(ctx, key, "cap")
}

// Apply tries every change whatever fails, reports each error at its
// change, and keeps at most inFlight requests at once.
func TestApply(t *testing.T) {
	var changes []Change
	for i := range 100 {
		changes = append(changes, Change{Key: string(rune('a'+i%26)) + string(rune('0'+i/26)), Cap: i%10 == 0, Max: 1, Limit: fsm.Limit{Rate: 1, Burst: 1}})
	}
	s := &fakeSetter{fail: map[string]bool{changes[3].Key: true, changes[50].Key: true}, set: map[string]string{}}
	errs := Apply(t.Context(), s, changes, 8, time.Second)
	if len(errs) != len(changes) {
		t.Fatalf("%d errors for %d changes", len(errs), len(changes))
	}
	for i, ch := range changes {
		failed := s.fail[ch.Key]
		if (errs[i] != nil) != failed {
			t.Errorf("change %d (%s): err %v, want failed=%v", i, ch.Key, errs[i], failed)
		}
		want := "limit"
		if ch.Cap {
			want = "cap"
		}
		if !failed && s.set[ch.Key] != want {
			t.Errorf("change %d (%s): set as %q, want %q", i, ch.Key, s.set[ch.Key], want)
		}
	}
	if m := s.most.Load(); m > 8 || m < 2 {
		t.Errorf("at most %d requests at once, want 2..8", m)
	}
	if errs := Apply(t.Context(), s, nil, 8, time.Second); len(errs) != 0 {
		t.Errorf("no changes: %v", errs)
	}
}
