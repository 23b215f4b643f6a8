package gcra

import (
	"errors"
	"math/rand"
	"sort"
	"testing"
)

const sec = int64(1e9)

type step struct {
	now       int64
	n         int
	wantStart int64
	wantTAT   int64
}

// run applies steps in order, committing every reservation, in the style of
// x/time/rate's tests.
func run(t *testing.T, p Params, tat int64, steps []step) {
	t.Helper()
	for i, s := range steps {
		start, next, err := Reserve(tat, p, s.now, s.n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if start != s.wantStart || next != s.wantTAT {
			t.Fatalf("step %d (now=%d n=%d): got start=%d tat=%d, want start=%d tat=%d",
				i, s.now, s.n, start, next, s.wantStart, s.wantTAT)
		}
		tat = next
	}
}

func TestReserve_SteadyRateBurstOne(t *testing.T) {
	p := NewParams(sec/10, 1) // 10/s
	run(t, p, 0, []step{
		{now: 0, n: 1, wantStart: 0, wantTAT: sec / 10},
		{now: 0, n: 1, wantStart: sec / 10, wantTAT: 2 * sec / 10},
		{now: 0, n: 1, wantStart: 2 * sec / 10, wantTAT: 3 * sec / 10},
		// idle: TAT is in the past, the next event goes at once
		{now: 5 * sec, n: 1, wantStart: 5 * sec, wantTAT: 5*sec + sec/10},
	})
}

func TestReserve_Burst(t *testing.T) {
	p := NewParams(sec/10, 3) // 10/s, burst 3: tau = 200ms
	run(t, p, 0, []step{
		{now: sec, n: 1, wantStart: sec, wantTAT: sec + sec/10},
		{now: sec, n: 1, wantStart: sec, wantTAT: sec + 2*sec/10},
		{now: sec, n: 1, wantStart: sec, wantTAT: sec + 3*sec/10},
		// bucket empty: the fourth waits one interval
		{now: sec, n: 1, wantStart: sec + sec/10, wantTAT: sec + 4*sec/10},
	})
}

func TestReserve_ManyAtOnce(t *testing.T) {
	p := NewParams(sec/10, 3)
	run(t, p, 0, []step{
		{now: sec, n: 3, wantStart: sec, wantTAT: sec + 3*sec/10},
		// TAT=1.3s: the last of 2 conforms at 1.3+0.1-0.2-... = TAT+T-tau = 1.2s
		{now: sec, n: 2, wantStart: sec + 2*sec/10, wantTAT: sec + 5*sec/10},
	})
}

// With burst 1, the design's n=1 formula applied to n=2 would admit two events
// at once; the generalised start must not.
func TestReserve_CountAboveBurstRefused(t *testing.T) {
	p := NewParams(sec/10, 1)
	if _, _, err := Reserve(0, p, 0, 2); !errors.Is(err, ErrTooMany) {
		t.Fatalf("got %v, want ErrTooMany", err)
	}
	if _, _, err := Reserve(0, p, 0, 0); err == nil {
		t.Fatal("n=0 accepted")
	}
}

func TestNewParams_Overflow(t *testing.T) {
	p := NewParams(1<<40, 1<<30)
	if p.Tolerance <= 0 {
		t.Fatalf("tolerance wrapped: %d", p.Tolerance)
	}
}

// Property: any sequence of grants, at any request times and sizes, has at
// most R*W + B events in every window of length W.
func TestReserve_CeilingProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 200; trial++ {
		interval := int64(1+rng.Intn(1000)) * 1e6 // 1ms..1s
		burst := 1 + rng.Intn(5)
		p := NewParams(interval, burst)
		var tat, now int64
		var events []int64
		for i := 0; i < 300; i++ {
			now += rng.Int63n(2 * interval)
			n := 1 + rng.Intn(burst)
			start, next, err := Reserve(tat, p, now, n)
			if err != nil {
				t.Fatal(err)
			}
			tat = next
			for j := 0; j < n; j++ {
				events = append(events, start)
			}
		}
		sort.Slice(events, func(i, j int) bool { return events[i] < events[j] })
		for _, w := range []int64{interval / 2, interval, 3 * interval, 10 * interval} {
			bound := float64(w)/float64(interval) + float64(burst)
			lo := 0
			for hi := range events {
				for events[hi]-events[lo] > w { // closed windows [t, t+w]
					lo++
				}
				if c := hi - lo + 1; float64(c) > bound+1e-9 {
					t.Fatalf("trial %d: %d events in a window of %d ns, bound %.2f (T=%d B=%d)", trial, c, w, bound, interval, burst)
				}
			}
		}
	}
}

func BenchmarkReserve(b *testing.B) {
	p := NewParams(1000, 10)
	var tat int64
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, next, _ := Reserve(tat, p, int64(i)*1000, 1)
		tat = next
	}
}
