package pgstore

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// Several keys are granted at one instant, or none moves: a refusal names
// the key that set the wait and leaves every cursor as it was.
func TestPool_ReserveAllOrNone(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "a", 1, time.Minute))
	tenant, global := fsm.Limit{Rate: 10, Burst: 1}, fsm.Limit{Rate: 1, Burst: 1}
	both := []PoolWant{{Key: "tenant", Limit: tenant, Count: 1}, {Key: "global", Limit: global, Count: 1}}
	w, first, err := s.reservePooledAll(ctx, "a", both, 0)
	if err != nil || w != 0 {
		t.Fatalf("both, fresh cursors: wait %v, %v; want at once", w, err)
	}
	for range 3 {
		_, err := s.ReservePooledAll(ctx, "a", both, 10*time.Millisecond)
		var le *LimitExceededError
		if !errors.As(err, &le) || le.Key != "global" || le.Wait < 900*time.Millisecond {
			t.Fatalf("both again within 10ms: %v; want a LimitExceededError naming global, about 1s", err)
		}
	}
	// The refusals left tenant's cursor at the grant: its next start is one
	// interval (100 ms) after the instant, not after global's next slot.
	_, next := reserve(t, s, "a", "tenant", tenant, 1, time.Second)
	if next-first != 100000 {
		t.Fatalf("tenant's next start is %dµs after the instant, want 100000 (refusals moved its cursor)", next-first)
	}
	// With global's slot a second away, both go at global's slot.
	_, at, err := s.reservePooledAll(ctx, "a", both, 2*time.Second)
	if err != nil || at-first != 1000000 {
		t.Fatalf("both with time to wait: start %dµs after the first, %v; want 1000000 (global's next slot)", at-first, err)
	}
	for _, bad := range [][]PoolWant{
		{},
		{{Key: "x", Limit: tenant, Count: 1}, {Key: "x", Limit: tenant, Count: 1}},
		{{Key: "x", Limit: tenant, Count: 2}, {Key: "y", Limit: tenant, Count: 1}},
	} {
		if _, err := s.ReservePooledAll(ctx, "a", bad, time.Second); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReservePooledAll(%v) = %v; want ErrInvalid", bad, err)
		}
	}
	if _, err := s.ReservePooledAll(ctx, "nobody", both, time.Second); !errors.Is(err, ErrNotInPool) {
		t.Errorf("a caller without a registration: %v; want ErrNotInPool", err)
	}
}

// Concurrent reservations of several keys, from two stores, beside single
// ones of the shared key, keep the shared key's ceiling, and lock their
// cursors without deadlocking (keys named in opposite orders).
func TestPool_ReserveAllConcurrentCeiling(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "c"), openStore(t, schema, "c")}
	ctx := ctxT(t)
	must(t, stores[0].JoinPool(ctx, "a", 0.25, time.Minute))
	must(t, stores[1].JoinPool(ctx, "b", 0.25, time.Minute))
	global := fsm.Limit{Rate: 400, Burst: 8} // R*F = 200/s, burst share 4
	tenant := fsm.Limit{Rate: 1000, Burst: 2}
	const slots = 200
	var mu sync.Mutex
	var starts []int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			s, id := stores[g%2], []string{"a", "b"}[g%2]
			tk := "tenant:" + strconv.Itoa(g%3)
			for i := 0; ; i++ {
				mu.Lock()
				done := len(starts) >= slots
				mu.Unlock()
				if done {
					return
				}
				wants := []PoolWant{{Key: tk, Limit: tenant, Count: 1}, {Key: "global", Limit: global, Count: 1}}
				if g%2 == 1 {
					slices.Reverse(wants)
				}
				if i%3 == 2 {
					wants = []PoolWant{{Key: "global", Limit: global, Count: 1}}
				}
				_, start, err := s.reservePooledAll(ctx, id, wants, 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				starts = append(starts, start)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(starts)
	rateF, share := 200.0, 4
	for _, w := range []int64{0, 5000, 20000, 100000, 500000} { // µs
		most := maxInWindow(starts, w)
		bound := int(math.Floor(rateF*float64(w)/1e6)) + share
		if most > bound {
			t.Errorf("window %dµs holds %d of global's starts, more than R*F*W + burst share = %d", w, most, bound)
		}
		t.Logf("window %6dµs: at most %3d starts (bound %d)", w, most, bound)
	}
}
