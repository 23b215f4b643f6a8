package pgstore

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// reserve calls reservePooled and fails the test on error.
func reserve(t *testing.T, s *Store, id, key string, lim fsm.Limit, count int, maxWait time.Duration) (time.Duration, int64) {
	t.Helper()
	w, start, err := s.reservePooled(ctxT(t), id, key, lim, count, maxWait)
	if err != nil {
		t.Fatalf("reserve %q count %d: %v", key, count, err)
	}
	return w, start
}

// TestPool_PacesAtRateTimesF: R = 100/s, two members with 0.25 each: the
// pool paces at 50/s, so sequential reservations start 20ms apart.
func TestPool_PacesAtRateTimesF(t *testing.T) {
	schema := newSchema(t)
	a, b := openStore(t, schema, "c"), openStore(t, schema, "c")
	ctx := ctxT(t)
	must(t, a.JoinPool(ctx, "a", 0.25, time.Minute))
	must(t, b.JoinPool(ctx, "b", 0.25, time.Minute))
	lim := fsm.Limit{Rate: 100, Burst: 1} // B*F = 0.5: one at a time
	reserve(t, a, "a", "warm-up", lim, 1, time.Second)
	reserve(t, b, "b", "warm-up", lim, 1, time.Second)

	var starts []int64
	var waits []time.Duration
	for i := range 20 {
		s, id := a, "a"
		if i%2 == 1 {
			s, id = b, "b"
		}
		w, start := reserve(t, s, id, "k", lim, 1, 2*time.Second)
		if i == 0 && w != 0 {
			t.Fatalf("first reservation waits %v, want 0", w)
		}
		starts, waits = append(starts, start), append(waits, w)
	}
	// A reservation that found the cursor ahead of now (wait > 0) starts
	// exactly one interval after the one before; one that found it idle (a
	// slow call) starts at its own now, later than that.
	queued := 0
	for i := 1; i < len(starts); i++ {
		d := starts[i] - starts[i-1]
		switch {
		case waits[i] > 0 && d != 20000:
			t.Fatalf("start %d (wait %v) is %dµs after start %d, want 20000µs (R*F = 50/s)", i, waits[i], d, i-1)
		case d < 20000:
			t.Fatalf("start %d is %dµs after start %d, want at least 20000µs (R*F = 50/s)", i, d, i-1)
		case waits[i] > 0:
			queued++
		}
	}
	if queued < 10 {
		t.Fatalf("only %d of 19 reservations found the cursor ahead: Postgres too slow to test the spacing", queued)
	}
	total := time.Duration(starts[19]-starts[0]) * time.Microsecond
	t.Logf("%d of 19 queued; 20 starts over %v", queued, total)
}

// TestPool_BurstShare: B = 10, F = 0.5 gives the pool a burst of 5.
func TestPool_BurstShare(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "a", 0.5, time.Minute))
	lim := fsm.Limit{Rate: 100, Burst: 10} // pool: 50/s, burst 5
	var starts []int64
	for i := range 8 {
		w, start := reserve(t, s, "a", "k", lim, 1, time.Second)
		if i < 5 && w > 5*time.Millisecond {
			t.Fatalf("reservation %d of the burst share waits %v", i, w)
		}
		starts = append(starts, start)
	}
	// The 6th may go one interval after the 1st, the 7th two, ...
	for i := 5; i < 8; i++ {
		if d := starts[i] - starts[0]; d < int64(i-4)*20000 {
			t.Fatalf("start %d is %dµs after the first, want >= %dµs", i, d, (i-4)*20000)
		}
	}

	// count: at most the burst share. A batch of 5 on a fresh key goes at
	// once; 6 is refused without touching the cursor.
	if w, _ := reserve(t, s, "a", "batch", lim, 5, time.Second); w != 0 {
		t.Fatalf("batch of 5 waits %v", w)
	}
	_, err := s.ReservePooled(ctx, "a", "batch2", lim, 6, time.Second)
	wantErr(t, err, ErrInvalid)
	if !strings.Contains(err.Error(), "burst share max(1, floor(B*F)) = 5") {
		t.Fatalf("error %q does not name the burst share", err)
	}
	if w, _ := reserve(t, s, "a", "batch2", lim, 5, time.Second); w != 0 {
		t.Fatalf("after the refused batch of 6, a batch of 5 waits %v: the refusal moved the cursor", w)
	}

	// B*F < 1: one at a time, with no burst at all.
	small := fsm.Limit{Rate: 100, Burst: 1}
	_, err = s.ReservePooled(ctx, "a", "small", small, 2, time.Second)
	wantErr(t, err, ErrInvalid)
	_, s1 := reserve(t, s, "a", "small", small, 1, time.Second)
	_, s2 := reserve(t, s, "a", "small", small, 1, time.Second)
	if s2-s1 != 20000 {
		t.Fatalf("B*F = 0.5: second start %dµs after the first, want 20000", s2-s1)
	}
}

// TestPool_RefusalDoesNotMoveCursor: a reservation past maxWait fails with
// *LimitExceededError and leaves the cursor where it was.
func TestPool_RefusalDoesNotMoveCursor(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "a", 1, time.Minute))
	lim := fsm.Limit{Rate: 1, Burst: 1} // 1s apart

	_, first := reserve(t, s, "a", "k", lim, 1, 0)
	for range 5 {
		_, err := s.ReservePooled(ctx, "a", "k", lim, 1, 10*time.Millisecond)
		var le *LimitExceededError
		if !errors.As(err, &le) || !errors.Is(err, ErrLimitExceeded) {
			t.Fatalf("reservation 1s out with maxWait 10ms: %v, want *LimitExceededError", err)
		}
		if le.Wait <= 10*time.Millisecond || le.Wait > time.Second || le.Key != "k" {
			t.Fatalf("LimitExceededError %+v: want Wait in (10ms, 1s]", le)
		}
	}
	w, second := reserve(t, s, "a", "k", lim, 1, 2*time.Second)
	if second-first != 1000000 {
		t.Fatalf("after 5 refusals the next start is %dµs after the first, want 1000000 (refusals must not move the cursor)", second-first)
	}
	if w <= 0 || w > time.Second {
		t.Fatalf("wait %v, want in (0, 1s]", w)
	}
}

// TestPool_ExpiredRegistrationsStopCounting: when one of two registrations
// expires, F halves and the interval doubles; when all have, ErrNotInPool.
func TestPool_ExpiredRegistrationsStopCounting(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "long", 0.5, time.Minute))
	must(t, s.JoinPool(ctx, "short", 0.5, time.Second))
	// 1/s, not 100/s: each pair's second start is the cursor only if it is
	// asked for within one interval of the first, and a loaded machine
	// took 11 ms between two calls (a CI run failed so at 100/s).
	lim := fsm.Limit{Rate: 1, Burst: 1}

	_, s1 := reserve(t, s, "long", "k", lim, 1, 5*time.Second)
	_, s2 := reserve(t, s, "long", "k", lim, 1, 5*time.Second)
	if s2-s1 != 1000000 {
		t.Fatalf("F = 1: starts %dµs apart, want 1000000", s2-s1)
	}
	time.Sleep(1200 * time.Millisecond)
	_, s3 := reserve(t, s, "long", "k2", lim, 1, 5*time.Second)
	_, s4 := reserve(t, s, "long", "k2", lim, 1, 5*time.Second)
	if s4-s3 != 2000000 {
		t.Fatalf("F = 0.5 after one registration expired: starts %dµs apart, want 2000000", s4-s3)
	}
	// Renewing keeps a registration; the lapsed one can come back.
	must(t, s.JoinPool(ctx, "short", 0.5, time.Minute))
	must(t, s.JoinPool(ctx, "long", 0.5, 200*time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	_, s5 := reserve(t, s, "short", "k3", lim, 1, 5*time.Second)
	_, s6 := reserve(t, s, "short", "k3", lim, 1, 5*time.Second)
	if s6-s5 != 2000000 {
		t.Fatalf("F = 0.5 after renewals: starts %dµs apart, want 2000000", s6-s5)
	}
	must(t, s.JoinPool(ctx, "short", 0.5, time.Millisecond))
	time.Sleep(20 * time.Millisecond)
	_, err := s.ReservePooled(ctx, "short", "k", lim, 1, 5*time.Second)
	wantErr(t, err, ErrNotInPool)
}

// TestPool_LeavePoolBusy: LeavePool reports how far ahead the cluster's
// cursors lie, and after the last member leaves the pool admits nothing.
func TestPool_LeavePoolBusy(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	busy, err := s.LeavePool(ctx, "nobody") // no registration, no cursor
	must(t, err)
	if busy != 0 {
		t.Fatalf("busy %v with no cursor, want 0", busy)
	}

	must(t, s.JoinPool(ctx, "a", 0.5, time.Minute))
	must(t, s.JoinPool(ctx, "b", 0.5, time.Minute))
	lim := fsm.Limit{Rate: 20, Burst: 1} // 50ms apart
	for range 9 {
		reserve(t, s, "b", "k", lim, 1, time.Second)
	}
	reserve(t, s, "b", "other", lim, 1, time.Second) // a cursor only one slot ahead
	before := time.Now()
	last, _ := reserve(t, s, "b", "k", lim, 1, time.Second)
	busy, err = s.LeavePool(ctx, "a")
	between := time.Since(before) // at least the time between the two statements
	must(t, err)
	// The last slot started `last` after its statement; the cursor lies one
	// interval past it, and LeavePool measured from a little later.
	if hi, lo := last+50*time.Millisecond, last+50*time.Millisecond-between; busy > hi || busy < lo {
		t.Fatalf("busy %v, want in [%v, %v] (last start + one interval - time between)", busy, lo, hi)
	}
	t.Logf("last wait %v, busy %v, %v between the statements", last, busy, between)

	// b is alone now: F = 0.5, 100ms apart.
	w1, s1 := reserve(t, s, "b", "fresh", lim, 1, time.Second)
	_, s2 := reserve(t, s, "b", "fresh", lim, 1, time.Second)
	if w1 != 0 || s2-s1 != 100000 {
		t.Fatalf("after a left: wait %v, spacing %dµs, want 0 and 100000", w1, s2-s1)
	}
	_, err = s.LeavePool(ctx, "b")
	must(t, err)
	_, err = s.ReservePooled(ctx, "b", "fresh", lim, 1, time.Second)
	wantErr(t, err, ErrNotInPool)
}

// TestPool_LeaveWaitsForReservationsInFlight: reservations run while a
// member leaves; every slot that was paced counting the leaver's fraction
// starts before the busy time LeavePool reports, and every slot after it
// is paced without the leaver's fraction.
func TestPool_LeaveWaitsForReservationsInFlight(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "c"), openStore(t, schema, "c")}
	ctx := ctxT(t)
	must(t, stores[0].JoinPool(ctx, "leaver", 0.5, time.Minute))
	must(t, stores[0].JoinPool(ctx, "stayer", 0.5, time.Minute))
	// F = 1: 20ms apart; after the leave F = 0.5: 40ms apart. Demand is
	// higher than either, so the cursor runs ahead of now (at 200/s a
	// loaded run's four callers did not keep up, and LeavePool found
	// nothing in flight).
	lim := fsm.Limit{Rate: 50, Burst: 1}
	const after1 = 40000 // µs between starts once the leaver is gone

	var mu sync.Mutex
	var starts []int64 // slot starts, µs since the epoch on Postgres's clock
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// maxWait keeps the cursor at most 300ms ahead, so that
				// reservations keep being admitted after the leave.
				_, start, err := stores[g%2].reservePooled(ctx, "stayer", "k", lim, 1, 300*time.Millisecond)
				if errors.Is(err, ErrLimitExceeded) {
					time.Sleep(2 * time.Millisecond)
					continue
				}
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
	// count returns the slots so far and how many start after us (µs).
	count := func(us int64) (all, later int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range starts {
			if s > us {
				later++
			}
		}
		return len(starts), later
	}
	// Leave once the cursor is ahead of now: slots are in flight.
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(50 * time.Millisecond)
		if all, ahead := count(pgNowUS(t, stores[1])); all >= 5 && ahead > 0 || time.Now().After(deadline) {
			break
		}
	}
	busy, err := stores[1].LeavePool(ctx, "leaver")
	after := pgNowUS(t, stores[1]) // taken after LeavePool returned
	must(t, err)
	// Go on until a few slots start after the busy end.
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(50 * time.Millisecond)
		if _, later := count(after + busy.Microseconds()); later >= 5 || time.Now().After(deadline) {
			break
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	// busy was measured from a moment before `after`: every slot paced with
	// the leaver's fraction starts before after + busy.
	limit := after + busy.Microseconds()
	slices.Sort(starts)
	fast, slow := 0, 0
	for i := 1; i < len(starts); i++ {
		d := starts[i] - starts[i-1]
		switch {
		case starts[i-1] < limit && d < after1:
			fast++ // paced with F = 1, as it may be before the leave
		case starts[i-1] >= limit && d < after1:
			t.Fatalf("starts %d and %d lie after the reported busy end but only %dµs apart: paced with the leaver's fraction",
				starts[i-1], starts[i], d)
		case starts[i-1] >= limit:
			slow++
		}
	}
	if fast == 0 || slow == 0 || busy <= 0 {
		t.Fatalf("%d pairs at F = 1 before the busy end, %d at F = 0.5 after, busy %v: the test did not exercise the leave", fast, slow, busy)
	}
	t.Logf("%d slots, busy %v, %d pairs at F = 1 before it, %d at F = 0.5 after", len(starts), busy, fast, slow)
}

// TestPool_ConcurrentCeiling: 8 goroutines on 2 Stores reserve 200 slots
// of one key. In every window of length W the sorted slot starts
// (Postgres's clock) number at most R*F*W + max(1, floor(B*F)). At 1000/s
// Postgres on a small machine may not outpace the rate; at 250/s it does,
// so the cursor runs ahead and the bound is tight.
func TestPool_ConcurrentCeiling(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  float64 // R; F = 0.5
		burst int     // B; burst share B*F
	}{
		{"1000/s", 2000, 20},
		{"250/s", 500, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := newSchema(t)
			stores := []*Store{openStore(t, schema, "c"), openStore(t, schema, "c")}
			ctx := ctxT(t)
			must(t, stores[0].JoinPool(ctx, "a", 0.25, time.Minute))
			must(t, stores[1].JoinPool(ctx, "b", 0.25, time.Minute))
			lim := fsm.Limit{Rate: tc.rate, Burst: tc.burst}
			const slots = 200
			rateF, burstShare := tc.rate*0.5, tc.burst/2

			var next atomic.Int64
			var mu sync.Mutex
			var starts []int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for next.Add(1) <= slots {
						_, start, err := stores[g%2].reservePooled(ctx, []string{"a", "b"}[g%2], "k", lim, 1, 5*time.Second)
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
			if len(starts) != slots {
				t.Fatalf("%d slots reserved, want %d", len(starts), slots)
			}
			slices.Sort(starts)
			for _, w := range []int64{0, 1000, 4000, 10000, 50000, 100000, 500000, 1000000} { // µs
				most := maxInWindow(starts, w)
				bound := int(math.Floor(rateF*float64(w)/1e6)) + max(1, burstShare)
				if most > bound {
					t.Errorf("window %dµs holds %d starts, more than R*F*W + max(1, floor(B*F)) = %d", w, most, bound)
				}
				t.Logf("window %7dµs: at most %3d starts (bound %d)", w, most, bound)
			}
			span := time.Duration(starts[len(starts)-1]-starts[0]) * time.Microsecond
			if least := time.Duration(float64(slots-burstShare) / rateF * float64(time.Second)); span < least {
				t.Errorf("%d slots span %v, less than (slots - burst share)/(R*F) = %v", slots, span, least)
			}
			t.Logf("%d slots over %v", slots, span)
		})
	}
}

// maxInWindow returns the largest number of sorted times in any closed
// window [t, t+w].
func maxInWindow(sorted []int64, w int64) int {
	most, j := 0, 0
	for i := range sorted {
		for sorted[i]-sorted[j] > w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

func TestPool_Invalid(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "a", 1, time.Minute))
	lim := fsm.Limit{Rate: 10, Burst: 2}
	for name, err := range map[string]error{
		"join: bad id":       s.JoinPool(ctx, "", 0.5, time.Second),
		"join: fraction > 1": s.JoinPool(ctx, "a", 1.5, time.Second),
		"join: fraction < 0": s.JoinPool(ctx, "a", -0.1, time.Second),
		"join: fraction NaN": s.JoinPool(ctx, "a", math.NaN(), time.Second),
		"join: ttl 0":        s.JoinPool(ctx, "a", 0.5, 0),
		"join: ttl too long": s.JoinPool(ctx, "a", 0.5, MaxPoolTTL+1),
		"leave: bad id":      func() error { _, err := s.LeavePool(ctx, "a b"); return err }(),
		"reserve: bad id":    func() error { _, err := s.ReservePooled(ctx, "a b", "k", lim, 1, 0); return err }(),
		"reserve: bad key":   func() error { _, err := s.ReservePooled(ctx, "a", "", lim, 1, 0); return err }(),
		"reserve: zero rate": func() error { _, err := s.ReservePooled(ctx, "a", "k", fsm.Limit{Burst: 1}, 1, 0); return err }(),
		"reserve: inf rate": func() error {
			_, err := s.ReservePooled(ctx, "a", "k", fsm.Limit{Rate: math.Inf(1), Burst: 1}, 1, 0)
			return err
		}(),
		"reserve: burst 0":     func() error { _, err := s.ReservePooled(ctx, "a", "k", fsm.Limit{Rate: 1}, 1, 0); return err }(),
		"reserve: count 0":     func() error { _, err := s.ReservePooled(ctx, "a", "k", lim, 0, 0); return err }(),
		"reserve: count>burst": func() error { _, err := s.ReservePooled(ctx, "a", "k", lim, 3, 0); return err }(),
		"reserve: neg maxWait": func() error { _, err := s.ReservePooled(ctx, "a", "k", lim, 1, -1); return err }(),
		"reserve: pool too slow": func() error {
			_, err := s.ReservePooled(ctx, "a", "k", fsm.Limit{Rate: 1e-7, Burst: 1}, 1, 0)
			return err
		}(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Nothing was consumed by the refused calls.
	if w, err := s.ReservePooled(ctx, "a", "k", lim, 2, 0); err != nil || w != 0 {
		t.Fatalf("after invalid calls: wait %v, err %v", w, err)
	}
}

// TestPool_ExtremeLimits: the largest and smallest valid limits neither
// overflow the statement's arithmetic nor admit more than they should.
func TestPool_ExtremeLimits(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "a", 1, time.Minute))
	for _, lim := range []fsm.Limit{
		{Rate: MinPoolRate, Burst: fsm.MaxBurst}, // interval ~11.6 days, tolerance capped
		{Rate: MinPoolRate, Burst: 1},
		{Rate: fsm.MaxRate, Burst: fsm.MaxBurst}, // interval 1µs
		{Rate: fsm.MaxRate, Burst: 1},
	} {
		key := "k" + strconv.FormatFloat(lim.Rate, 'g', -1, 64) + "-" + strconv.Itoa(lim.Burst)
		for i := range 3 {
			w, err := s.ReservePooled(ctx, "a", key, lim, 1, time.Hour)
			switch {
			case lim.Burst == 1 && lim.Rate == MinPoolRate && i > 0:
				var le *LimitExceededError
				if !errors.As(err, &le) || le.Wait < 11*24*time.Hour {
					t.Fatalf("%+v, reservation %d: %v, want *LimitExceededError with a wait of about 11.6 days", lim, i, err)
				}
			case err != nil:
				t.Fatalf("%+v, reservation %d: %v", lim, i, err)
			case w > time.Millisecond:
				t.Fatalf("%+v, reservation %d: wait %v, want ~0 (within the burst or 1µs apart)", lim, i, w)
			}
		}
		if lim.Rate == MinPoolRate && lim.Burst > 1 {
			// The whole burst at once, after 3: ~31,700 years out.
			_, err := s.ReservePooled(ctx, "a", key, lim, lim.Burst, time.Hour)
			var le *LimitExceededError
			if !errors.As(err, &le) || le.Wait < 290*365*24*time.Hour {
				t.Fatalf("%+v: a batch of the whole burst after 3 reservations: %v, want *LimitExceededError with a wait of centuries", lim, err)
			}
		}
	}
}

func TestPool_ContextCancelled(t *testing.T) {
	s := newStore(t, "c")
	must(t, s.JoinPool(ctxT(t), "a", 1, time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.ReservePooled(ctx, "a", "k", fsm.Limit{Rate: 1, Burst: 1}, 1, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func BenchmarkReservePooled(b *testing.B) {
	s := newStore(b, "c")
	ctx := context.Background()
	must(b, s.JoinPool(ctx, "a", 1, time.Hour))
	lim := fsm.Limit{Rate: fsm.MaxRate, Burst: fsm.MaxBurst} // never waits
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ReservePooled(ctx, "a", "bench", lim, 1, time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.ReservePooled(ctx, "a", "bench", lim, 1, time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
