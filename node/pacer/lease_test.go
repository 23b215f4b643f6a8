package pacer

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
)

// testPacer returns a leading pacer with one key at lim whose horizon is
// far away, and a settable clock.
func testPacer(t testing.TB, lim fsm.Limit, span time.Duration) (*Pacer, *int64) {
	t.Helper()
	var clock int64 = 1e12
	return leadingPacer(t, func() int64 { return clock }, lim, span), &clock
}

// only is a limitOf giving key lim and every other key none.
func only(key string, lim fsm.Limit) func(string) (fsm.Limit, bool) {
	return func(k string) (fsm.Limit, bool) { return lim, k == key }
}

// leadingPacer is a pacer on the clock now that leads, with key "k" at lim
// and a horizon that never binds.
func leadingPacer(t testing.TB, now func() int64, lim fsm.Limit, span time.Duration) *Pacer {
	t.Helper()
	p := New(now, time.Second, span,
		func(string) (int64, bool) { return 0, false },
		only("k", lim))
	if !p.Lead(p.StepDown()) {
		t.Fatal("pacer did not lead")
	}
	p.mu.Lock()
	p.keyLocked("k").horizon = 1 << 62
	p.mu.Unlock()
	return p
}

// A lease is GCRA in closed form: its slots are exactly those that single
// reservations made one after another at the same instant would get, and it
// leaves the same TAT.
func TestLease_EqualsSequentialGCRA(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for trial := 0; trial < 500; trial++ {
		lim := fsm.Limit{Rate: float64(1 + rng.Intn(100000)), Burst: 1 + rng.Intn(20)}
		p, clock := testPacer(t, lim, time.Hour) // no span cap
		ks := p.keys["k"]
		ks.tat = *clock + rng.Int63n(int64(time.Second)) - int64(500*time.Millisecond)
		tat0 := ks.tat
		count := 1 + rng.Intn(50)
		l, err := p.Lease(context.Background(), nil, "k", "n1", count, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		params := gcra.NewParams(int64(lim.Interval()), lim.Burst)
		tat := tat0
		for i := 0; i < l.Count; i++ {
			start, next, err := gcra.Reserve(tat, params, *clock, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := *clock + l.Slot(i); got != start {
				t.Fatalf("trial %d slot %d: lease says %d, sequential GCRA %d", trial, i, got, start)
			}
			tat = next
		}
		if ks.tat != tat {
			t.Fatalf("trial %d: TAT after lease %d, sequential %d", trial, ks.tat, tat)
		}
		if l.Count != count {
			t.Fatalf("trial %d: got %d slots, asked %d with no cap", trial, l.Count, count)
		}
	}
}

func TestLease_Caps(t *testing.T) {
	ctx := context.Background()
	t.Run("one span at the full rate, plus the burst", func(t *testing.T) {
		p, _ := testPacer(t, fsm.Limit{Rate: 10000, Burst: 5}, 20*time.Millisecond)
		l, _ := p.Lease(ctx, nil, "k", "n1", 1e6, time.Hour)
		if want := 5 + 200; l.Count != want { // burst 5 at once (1 + 4 of tolerance) + 20ms * 10k/s
			t.Errorf("got %d slots, want %d", l.Count, want)
		}
	})
	t.Run("low rates are paced slot by slot", func(t *testing.T) {
		p, _ := testPacer(t, fsm.Limit{Rate: 7, Burst: 1}, 20*time.Millisecond)
		for i := 0; i < 5; i++ {
			l, err := p.Lease(ctx, nil, "k", "n1", 100, time.Hour)
			if err != nil || l.Count != 1 {
				t.Fatalf("lease %d: %d slots, %v; want 1", i, l.Count, err)
			}
		}
	})
	t.Run("a node holding two spans ahead gets one slot", func(t *testing.T) {
		p, _ := testPacer(t, fsm.Limit{Rate: 10000, Burst: 1}, 20*time.Millisecond)
		var got []int
		for i := 0; i < 4; i++ {
			l, _ := p.Lease(ctx, nil, "k", "greedy", 1e6, time.Hour)
			got = append(got, l.Count)
		}
		// Two blocks of a span each, then it holds more than 2 spans
		// ahead: one slot at a time.
		if got[0] < 200 || got[1] < 200 || got[2] != 1 || got[3] != 1 {
			t.Errorf("greedy node got %v", got)
		}
		// Another node is not held back by the greedy one's holding: it
		// gets a full block after it.
		l, _ := p.Lease(ctx, nil, "k", "other", 1e6, time.Hour)
		if l.Count < 200 {
			t.Errorf("other got %d slots, want a full block", l.Count)
		}
	})
	t.Run("cut to fit under the horizon", func(t *testing.T) {
		p, clock := testPacer(t, fsm.Limit{Rate: 1000, Burst: 1}, time.Second)
		p.keys["k"].horizon = *clock + int64(10*time.Millisecond)
		l, _ := p.Lease(ctx, nil, "k", "n1", 1000, time.Hour)
		if l.Count != 10 {
			t.Errorf("got %d slots under a 10ms horizon at 1000/s, want 10", l.Count)
		}
		if p.keys["k"].tat > p.keys["k"].horizon {
			t.Errorf("TAT %d passed the horizon %d", p.keys["k"].tat, p.keys["k"].horizon)
		}
	})
	t.Run("first slot beyond max wait is refused and consumes nothing", func(t *testing.T) {
		p, clock := testPacer(t, fsm.Limit{Rate: 1, Burst: 1}, 20*time.Millisecond)
		p.keys["k"].tat = *clock + int64(5*time.Second)
		_, err := p.Lease(ctx, nil, "k", "n1", 1, time.Second)
		if _, ok := err.(*raftpace.LimitExceededError); !ok {
			t.Fatalf("got %v, want raftpace.LimitExceededError", err)
		}
		if p.keys["k"].tat != *clock+int64(5*time.Second) {
			t.Error("refused lease moved the TAT")
		}
	})
}

// BenchmarkLeaderLease is the leader granting a lease of up to 1000 slots
// (closed form: the cost does not depend on the count). Slots/s is what
// the leader could grant through leases of that size on one core.
func BenchmarkLeaderLease(b *testing.B) {
	p, clock := testPacer(b, fsm.Limit{Rate: 1e9, Burst: 1}, time.Hour)
	ctx := context.Background()
	b.ReportAllocs()
	slots := 0
	for i := 0; i < b.N; i++ {
		*clock += 1000
		l, err := p.Lease(ctx, nil, "k", "n1", 1000, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		slots += l.Count
	}
	b.ReportMetric(float64(slots)/b.Elapsed().Seconds(), "slots/s")
}
