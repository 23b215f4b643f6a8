package timeline

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is an arbitrary start time: 2023-11-14T22:13:20Z in unix nanoseconds.
const t0 int64 = 1_700_000_000_000_000_000

const ms = int64(time.Millisecond)

// paced returns what an ideal limiter of rate r and burst b admits under
// unbounded demand from start: b events at start, then one every 1/r for
// steps more. r must divide 1e9 so that the times are exact.
func paced(start int64, r, b, steps int, node, key string) []Event {
	gap := int64(time.Second) / int64(r)
	evs := make([]Event, 0, b+steps)
	for range b {
		evs = append(evs, Event{At: start, Node: node, Key: key})
	}
	for k := 1; k <= steps; k++ {
		evs = append(evs, Event{At: start + int64(k)*gap, Node: node, Key: key})
	}
	return evs
}

func durations(ds ...int64) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = time.Duration(d)
	}
	return out
}

// window returns rep's result for w, failing the test if there is none.
func window(t *testing.T, rep KeyReport, w time.Duration) WindowResult {
	t.Helper()
	for _, r := range rep.Windows {
		if r.Window == w {
			return r
		}
	}
	t.Fatalf("no result for window %v in\n%s", w, rep)
	return WindowResult{}
}

func TestCheck_PacedSequenceIsTight(t *testing.T) {
	const r, b = 20, 5
	evs := paced(t0, r, b, 200, "n1", "k")
	tests := []struct {
		w    time.Duration
		want int // MaxCount: b + floor(r*w), i.e. floor(Bound)
	}{
		// R*W fractional.
		{525 * time.Millisecond, b + 10},  // bound 15.5
		{1025 * time.Millisecond, b + 20}, // bound 25.5
		{2025 * time.Millisecond, b + 40}, // bound 45.5
		{5025 * time.Millisecond, b + 100},
		{10 * time.Millisecond, b}, // shorter than 1/R: the burst alone
		// R*W integral: the closed window [t0, t0+W] takes in the event at
		// t0+W and meets the bound exactly.
		{500 * time.Millisecond, b + 10}, // bound 15
		{time.Second, b + 20},
		{2 * time.Second, b + 40},
		{5 * time.Second, b + 100},
	}
	spec := Spec{Limit: Limit{Rate: r, Burst: b}}
	for _, tt := range tests {
		spec.Windows = append(spec.Windows, tt.w)
	}
	rep := Check(evs, "k", spec)
	if !rep.OK() {
		t.Fatalf("paced sequence flagged:\n%s", rep)
	}
	for _, tt := range tests {
		got := window(t, rep, tt.w)
		if got.MaxCount != tt.want || got.WorstStart != t0 || got.Over {
			t.Errorf("W=%v: got max=%d start=%d over=%v, want max=%d start=%d over=false",
				tt.w, got.MaxCount, got.WorstStart, got.Over, tt.want, t0)
		}
		wantBound := r*tt.w.Seconds() + b
		if math.Abs(got.Bound-wantBound) > 1e-9 {
			t.Errorf("W=%v: bound %v, want %v", tt.w, got.Bound, wantBound)
		}
	}
	if rep.Events != b+200 || rep.First != t0 || rep.Last != t0+200*50*ms {
		t.Errorf("events=%d first=%d last=%d", rep.Events, rep.First, rep.Last)
	}
}

func TestCheck_DeltaWidensBound(t *testing.T) {
	evs := paced(t0, 20, 5, 100, "n1", "k")
	// One extra event at t0 makes the burst window hold 16 against a bound
	// of 15.5; a 50ms delta allowance (+1 event) covers it.
	evs = append(evs, Event{At: t0, Node: "n1", Key: "k"})
	w := []time.Duration{525 * time.Millisecond}
	if rep := Check(evs, "k", Spec{Limit: Limit{Rate: 20, Burst: 5}, Windows: w}); rep.OK() {
		t.Errorf("without delta: want over, got\n%s", rep)
	}
	rep := Check(evs, "k", Spec{Limit: Limit{Rate: 20, Burst: 5}, Windows: w, Delta: 50 * time.Millisecond})
	if !rep.OK() || rep.Windows[0].Bound != 16.5 {
		t.Errorf("with delta: want ok with bound 16.5, got\n%s", rep)
	}
}

func TestCheck_OneExtraEventIsCaught(t *testing.T) {
	tests := []struct {
		name      string
		r, b      int
		w         time.Duration
		extra     int64 // time of the surplus event
		wantMax   int
		wantStart int64
	}{
		// B=1, R=10, W=250ms: every window starting at an event holds 3
		// against a bound of 3.5, so a surplus anywhere in the paced span
		// is caught.
		{"b1 at start", 10, 1, 250 * time.Millisecond, t0, 4, t0},
		// [300ms, 550ms] is closed, so it holds the surplus at 550ms.
		{"b1 between events", 10, 1, 250 * time.Millisecond, t0 + 550*ms, 4, t0 + 300*ms},
		{"b1 on an event", 10, 1, 250 * time.Millisecond, t0 + 2000*ms, 4, t0 + 1800*ms},
		{"b1 at the last event", 10, 1, 250 * time.Millisecond, t0 + 5000*ms, 4, t0 + 4800*ms},
		{"b1 after the end", 10, 1, 250 * time.Millisecond, t0 + 5049*ms, 4, t0 + 4800*ms},
		// [4800ms, 5050ms] is closed. (At t0+5050ms+1ns the surplus would
		// not be caught: it is outside every window holding 3 events.)
		{"b1 at the closed end of the last window", 10, 1, 250 * time.Millisecond, t0 + 5050*ms, 4, t0 + 4800*ms},
		{"b1 1ns before an event", 10, 1, 250 * time.Millisecond, t0 + 3000*ms - 1, 4, t0 + 2800*ms},
		// B=5, R=20, W=525ms: the burst window holds 15 against 15.5.
		{"b5 in the burst", 20, 5, 525 * time.Millisecond, t0, 16, t0},
		{"b5 just after the burst", 20, 5, 525 * time.Millisecond, t0 + 1*ms, 16, t0},
		{"b5 at the window's last event", 20, 5, 525 * time.Millisecond, t0 + 500*ms, 16, t0},
		{"b5 just inside the window", 20, 5, 525 * time.Millisecond, t0 + 525*ms - 1, 16, t0},
		{"b5 at the window's closed end", 20, 5, 525 * time.Millisecond, t0 + 525*ms, 16, t0},
		// B=5, R=20, W=500ms (R*W whole): the burst window holds 15
		// against a bound of 15, so a surplus is caught here too.
		{"b5 integral W in the burst", 20, 5, 500 * time.Millisecond, t0, 16, t0},
		{"b5 integral W at the window's closed end", 20, 5, 500 * time.Millisecond, t0 + 500*ms, 16, t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Limit: Limit{Rate: float64(tt.r), Burst: tt.b}, Windows: []time.Duration{tt.w}}
			evs := paced(t0, tt.r, tt.b, 50*tt.r/10, "n1", "k") // 5s of steady pacing
			if rep := Check(evs, "k", spec); !rep.OK() {
				t.Fatalf("without the extra event: want ok, got\n%s", rep)
			}
			evs = append(evs, Event{At: tt.extra, Node: "n2", Key: "k"})
			rep := Check(evs, "k", spec)
			got := rep.Windows[0]
			if !got.Over || rep.OK() || got.MaxCount != tt.wantMax || got.WorstStart != tt.wantStart {
				t.Errorf("got over=%v max=%d start=+%v, want over=true max=%d start=+%v\n%s",
					got.Over, got.MaxCount, time.Duration(got.WorstStart-t0),
					tt.wantMax, time.Duration(tt.wantStart-t0), rep)
			}
		})
	}
}

// With R*W an integer a closed window of a paced sequence meets the bound
// exactly, so one surplus event passes it and is caught (doc.go).
func TestCheck_IntegerWindowCatchesSurplus(t *testing.T) {
	evs := paced(t0, 10, 1, 50, "n1", "k")
	spec := Spec{Limit: Limit{Rate: 10, Burst: 1}, Windows: durations(200 * ms)}
	if got := Check(evs, "k", spec).Windows[0]; got.Over || got.MaxCount != 3 || got.Bound != 3 {
		t.Errorf("without the extra event: got %+v, want max=3 bound=3 not over", got)
	}
	evs = append(evs, Event{At: t0 + 550*ms, Node: "n2", Key: "k"})
	got := Check(evs, "k", spec).Windows[0]
	if !got.Over || got.MaxCount != 4 || got.Bound != 3 || got.WorstStart != t0+400*ms {
		t.Errorf("got %+v, want max=4 bound=3 start=+400ms over", got)
	}
}

// Coordination off: N processes each pacing alone at R together admit
// about N*R, and the checker says so.
func TestCheck_CoordinationOff(t *testing.T) {
	const n, r, b = 3, 20, 5
	var evs []Event
	for i := range n {
		node := string(rune('a' + i))
		evs = append(evs, paced(t0+int64(i)*7*ms, r, b, 200, node, "k")...)
	}
	spec := Spec{
		Limit:   Limit{Rate: r, Burst: b},
		Windows: durations(500*ms, 1000*ms, 2000*ms, 5000*ms),
		Delta:   time.Millisecond,
		From:    t0 + 1000*ms,
		To:      t0 + 9000*ms,
	}
	rep := Check(evs, "k", spec)
	if rep.OK() {
		t.Fatalf("coordination off: want every window over, got\n%s", rep)
	}
	for _, w := range rep.Windows {
		// The window [t0, t0+W] holds all three bursts, node a's next R*W
		// events (the last at exactly t0+W) and R*W-1 from each of the
		// others (their next falls 7ms or 14ms past t0+W).
		want := n*(b+int(r*w.Window.Seconds())-1) + 1
		if !w.Over || w.MaxCount != want || w.WorstStart != t0 {
			t.Errorf("W=%v: got %+v, want over with max=%d at t0", w.Window, w, want)
		}
	}
	// In [t0+1s, t0+9s) each node admits exactly 160 events: 60/s in all.
	if rep.RateEvents != 480 || rep.AchievedRate != 60 || rep.Utilisation != 3 {
		t.Errorf("rate events=%d rate=%v utilisation=%v, want 480, 60, 3",
			rep.RateEvents, rep.AchievedRate, rep.Utilisation)
	}
	for i := range n {
		if got := rep.PerNode[string(rune('a'+i))]; got != b+200 {
			t.Errorf("node %c: %d events, want %d", 'a'+i, got, b+200)
		}
	}
	if s := rep.String(); !strings.Contains(s, "OVER at 2023-11-14T22:13:20Z (+0s)") ||
		!strings.Contains(s, "rate=60.00/s (300.0% of 20) nodes: a=205 b=205 c=205") {
		t.Errorf("String() =\n%s", s)
	}

	// Coordination on: the same global pacing spread over the nodes passes.
	one := paced(t0, r, b, 200, "", "k")
	for i := range one {
		one[i].Node = string(rune('a' + i%n))
	}
	spec.Windows = durations(525*ms, 1025*ms)
	rep = Check(one, "k", spec)
	if !rep.OK() || rep.AchievedRate != 20 {
		t.Errorf("coordination on: want ok at 20/s, got\n%s", rep)
	}
}

func TestCheck_EdgeCases(t *testing.T) {
	ev := func(at int64, key string) Event { return Event{At: at, Node: "n1", Key: key} }
	same := func(n int, at int64, key string) []Event {
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = ev(at, key)
		}
		return evs
	}
	tests := []struct {
		name      string
		events    []Event
		limit     Limit
		wantN     int
		wantMax   int
		wantStart int64
		wantOver  bool
		wantRate  float64
	}{
		{name: "empty", limit: Limit{1, 1}},
		{name: "only other keys", events: same(5, t0, "x"), limit: Limit{1, 1}},
		{name: "single event", events: []Event{ev(t0, "k")}, limit: Limit{1, 1},
			wantN: 1, wantMax: 1, wantStart: t0},
		{name: "identical timestamps within burst", events: same(10, t0, "k"), limit: Limit{1, 10},
			wantN: 10, wantMax: 10, wantStart: t0},
		{name: "identical timestamps over burst", events: same(10, t0, "k"), limit: Limit{1, 8},
			wantN: 10, wantMax: 10, wantStart: t0, wantOver: true},
		{name: "identical timestamps later", events: append([]Event{ev(t0, "k")}, same(3, t0+5000*ms, "k")...),
			limit: Limit{1, 1}, wantN: 4, wantMax: 3, wantStart: t0 + 5000*ms, wantOver: true, wantRate: 0.6},
		{name: "closed: an event at t+W is inside", events: []Event{ev(t0, "k"), ev(t0+1000*ms, "k")},
			limit: Limit{0, 1}, wantN: 2, wantMax: 2, wantStart: t0, wantOver: true, wantRate: 1},
		{name: "closed: an event at t+W+1ns is outside", events: []Event{ev(t0, "k"), ev(t0+1000*ms+1, "k")},
			limit: Limit{0, 1}, wantN: 2, wantMax: 1, wantStart: t0, wantRate: 1 / (1 + 1e-9)},
		{name: "other keys ignored", limit: Limit{1, 1},
			events: append(same(100, t0+500*ms, "other"), ev(t0, "x"), ev(t0, "k"), ev(t0+2000*ms, "k")),
			wantN:  2, wantMax: 1, wantStart: t0, wantRate: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(tt.events, "k", Spec{Limit: tt.limit, Windows: durations(1000 * ms)})
			got := rep.Windows[0]
			if rep.Events != tt.wantN || got.MaxCount != tt.wantMax || got.WorstStart != tt.wantStart ||
				got.Over != tt.wantOver || rep.OK() == tt.wantOver {
				t.Errorf("got events=%d %+v, want events=%d max=%d start=%d over=%v",
					rep.Events, got, tt.wantN, tt.wantMax, tt.wantStart, tt.wantOver)
			}
			if math.Abs(rep.AchievedRate-tt.wantRate) > 1e-9 {
				t.Errorf("rate %v, want %v", rep.AchievedRate, tt.wantRate)
			}
			var perNode int
			for _, c := range rep.PerNode {
				perNode += c
			}
			if perNode != rep.Events {
				t.Errorf("PerNode %v sums to %d, want %d", rep.PerNode, perNode, rep.Events)
			}
		})
	}
}

func TestCheck_AchievedRate(t *testing.T) {
	evs := paced(t0, 10, 1, 100, "n1", "k") // t0, t0+100ms, ..., t0+10s: 101 events
	tests := []struct {
		name       string
		from, to   int64
		wantEvents int
		wantRate   float64
	}{
		{"whole span", 0, 0, 101, 10},
		{"interval", t0 + 1000*ms, t0 + 3000*ms, 20, 10},
		{"interval is half-open", t0 + 1000*ms, t0 + 3000*ms + 1, 21, 21 / (2 + 1e-9)},
		{"from only: to is just after the last event", t0 + 5000*ms, 0, 51, 51 / (5 + 1e-9)},
		{"to only: from is the first event", 0, t0 + 1000*ms, 10, 10},
		{"empty interval", t0 + 2000*ms, t0 + 2000*ms, 0, 0},
		{"reversed interval", t0 + 2000*ms, t0 + 1000*ms, 0, 0},
		{"interval beyond the events", t0 + 20000*ms, t0 + 30000*ms, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(evs, "k", Spec{Limit: Limit{Rate: 10, Burst: 1}, From: tt.from, To: tt.to})
			if rep.RateEvents != tt.wantEvents || math.Abs(rep.AchievedRate-tt.wantRate) > 1e-9 ||
				math.Abs(rep.Utilisation-tt.wantRate/10) > 1e-9 {
				t.Errorf("got %d events, %v/s, utilisation %v; want %d, %v/s",
					rep.RateEvents, rep.AchievedRate, rep.Utilisation, tt.wantEvents, tt.wantRate)
			}
		})
	}
}

func TestCheck_UnsortedInputAndDefaults(t *testing.T) {
	sorted := paced(t0, 20, 5, 400, "n1", "k")
	shuffled := slices.Clone(sorted)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	before := slices.Clone(shuffled)
	spec := Spec{Limit: Limit{Rate: 20, Burst: 5}} // nil Windows: defaults
	want, got := Check(sorted, "k", spec), Check(shuffled, "k", spec)
	if !slices.Equal(got.Windows, want.Windows) || got.AchievedRate != want.AchievedRate ||
		got.First != want.First || got.Last != want.Last {
		t.Errorf("shuffled:\n%s\nsorted:\n%s", got, want)
	}
	if !slices.Equal(shuffled, before) {
		t.Error("Check modified its input")
	}
	var ws []time.Duration
	for _, w := range got.Windows {
		ws = append(ws, w.Window)
	}
	if !slices.Equal(ws, DefaultWindows()) {
		t.Errorf("windows %v, want defaults %v", ws, DefaultWindows())
	}

	rep := Check(sorted, "k", Spec{Limit: Limit{Rate: 20, Burst: 5}, Windows: durations(0, -1)})
	for _, w := range rep.Windows {
		if w.MaxCount != 0 || w.Over {
			t.Errorf("non-positive window %v: %+v, want empty", w.Window, w)
		}
	}
}

// Float noise in the bound must not make a count equal to it "over".
func TestCheck_BoundEpsilon(t *testing.T) {
	// 0.3*9 + 1 + 0.3*1 = 3.9999999999999996 in float64, not 4.
	spec := Spec{Limit: Limit{Rate: 0.3, Burst: 1}, Windows: durations(9000 * ms), Delta: time.Second}
	var evs []Event
	for i := range 4 {
		evs = append(evs, Event{At: t0 + int64(i), Node: "n", Key: "k"})
	}
	rep := Check(evs, "k", spec)
	if b := rep.Windows[0].Bound; b >= 4 || !rep.OK() {
		t.Errorf("bound %v (want float noise just under 4): 4 events flagged=%v", b, !rep.OK())
	}
	evs = append(evs, Event{At: t0, Node: "n", Key: "k"})
	if rep := Check(evs, "k", spec); rep.OK() {
		t.Errorf("5 events against a bound of 4 not flagged")
	}
}

// maxInWindow agrees with a brute-force count over every closed window
// that starts or ends at an event, on random inputs with many ties.
func TestMaxInWindow_MatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		n := rng.IntN(40)
		times := make([]int64, n)
		for i := range times {
			times[i] = t0 + rng.Int64N(50)*10*ms
		}
		slices.Sort(times)
		w := time.Duration(1+rng.Int64N(200)) * time.Millisecond
		got, gotStart := maxInWindow(times, w)

		count := func(start int64) int {
			c := 0
			for _, x := range times {
				if x >= start && x <= start+int64(w) {
					c++
				}
			}
			return c
		}
		want, wantStart := 0, int64(0)
		for _, x := range times {
			if c := count(x); c > want {
				want, wantStart = c, x
			}
			if c := count(x - int64(w)); c > want {
				t.Fatalf("iter %d: window ending at %d holds %d, more than any starting at an event", iter, x, c)
			}
		}
		if got != want || gotStart != wantStart {
			t.Fatalf("iter %d: W=%v times=%v: got (%d, %d), want (%d, %d)", iter, w, times, got, gotStart, want, wantStart)
		}
	}
}

func TestKeyReport_String(t *testing.T) {
	evs := paced(t0, 20, 1, 10, "n2", "k")
	evs = append(evs, Event{At: t0 + 260*ms, Node: "n1", Key: "k"})
	spec := Spec{Limit: Limit{Rate: 20, Burst: 1}, Windows: durations(60*ms, 1000*ms), Delta: 5 * time.Millisecond}
	got := Check(evs, "k", spec).String()
	want := strings.Join([]string{
		"key=k events=12 rate=22.00/s (110.0% of 20) nodes: n1=1 n2=11",
		"  spread: longest gap n1=260ms n2=50ms",                            // n1: from the first event to its only one
		"  W=60ms max=3 bound=2.30 OVER at 2023-11-14T22:13:20.2Z (+200ms)", // [200ms, 260ms]
		"  W=1s max=12 bound=21.10 ok",
	}, "\n")
	if got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

// The spread: three nodes at 10/s each for 4 s, except that n3 admits
// nothing in its second second (a starved node) while n1 takes its events.
func TestCheck_Fairness(t *testing.T) {
	var evs []Event
	for i := range 40 {
		at := t0 + int64(i)*100*ms
		for _, n := range []string{"n1", "n2", "n3"} {
			node := n
			if n == "n3" && at >= t0+1000*ms && at < t0+2000*ms {
				node = "n1"
			}
			evs = append(evs, Event{At: at + 1, Node: node, Key: "k"}) // +1: n1 first in each tick
		}
	}
	slices.Reverse(evs) // unsorted input
	f := Check(evs, "k", Spec{Limit: Limit{Rate: 30, Burst: 3}}).Fairness
	if f.LongestGap["n3"] != time.Duration(1100*ms) || f.LongestGap["n1"] != time.Duration(100*ms) || f.LongestGap["n2"] != time.Duration(100*ms) {
		t.Errorf("longest gaps %v, want n3 1.1s (its last event before the second, at +0.9s, to its next at +2.0s), n1 and n2 100ms", f.LongestGap)
	}
	if f.Seconds != 3 || f.Starved != 1 {
		t.Errorf("%d of %d s starved, want 1 of 3 (the span is 3.9 s)", f.Starved, f.Seconds)
	}
	even := Check(evs[:0:0], "k", Spec{})
	if len(even.Fairness.LongestGap) != 0 || even.Fairness.Seconds != 0 {
		t.Errorf("no events: %+v", even.Fairness)
	}
}
