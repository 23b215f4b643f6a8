package timeline

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Limit is a key's rate limit: Rate events per second with burst Burst.
type Limit struct {
	Rate  float64
	Burst int
}

// DefaultWindows are the window lengths Check uses when Spec.Windows is nil.
func DefaultWindows() []time.Duration {
	return []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}
}

// Spec says what Check measures.
type Spec struct {
	Limit Limit
	// Windows are the window lengths W to check; nil means DefaultWindows.
	// A window that is not positive contains no events.
	Windows []time.Duration
	// Delta is the allowance for the delay between a grant and its use:
	// the bound for a window W is Rate*W + Burst + Rate*Delta.
	Delta time.Duration
	// From and To (unix nanoseconds) select the interval [From, To) over
	// which AchievedRate is measured. Both zero means the span from the
	// key's first to its last event. If only one is zero, From defaults to
	// the first event and To to just after the last. They do not restrict
	// the window check, which always covers every event.
	From, To int64
}

// WindowResult is the outcome for one window length.
type WindowResult struct {
	Window time.Duration
	// MaxCount is the largest number of the key's events in any closed
	// interval [t, t+Window]: an event at exactly t+Window is inside.
	MaxCount int
	// Bound is Rate*Window + Burst + Rate*Delta.
	Bound float64
	// WorstStart is the time (unix nanoseconds) of the first event of the
	// earliest window holding MaxCount events; 0 if there are no events.
	WorstStart int64
	// Over reports MaxCount > Bound (beyond float rounding).
	Over bool
}

// KeyReport is what Check found for one key.
type KeyReport struct {
	Key         string
	Limit       Limit
	Events      int   // all of the key's events
	First, Last int64 // times of its first and last event; 0 if none
	// RateEvents is the number of events AchievedRate counts: those in
	// [From, To), or all of them when Spec.From and Spec.To are zero.
	RateEvents int
	// AchievedRate is in events per second; see Spec.From. Without From
	// and To it is (Events-1)/(Last-First), and 0 when there are fewer
	// than two events or they all share one timestamp.
	AchievedRate float64
	// Utilisation is AchievedRate/Limit.Rate (0 when Rate is not positive).
	Utilisation float64
	Windows     []WindowResult
	PerNode     map[string]int // events per node id
	Fairness    Fairness
}

// overEpsilon is the relative tolerance for comparing a count with a bound,
// so that float noise in Rate*W (e.g. 0.1*30 = 3.0000000000000004) never
// turns a count equal to the bound into a violation.
const overEpsilon = 1e-9

// Check measures key's events against spec and ignores events of other
// keys. events need not be sorted, and Check does not modify them. It runs
// in O(n log n) for unsorted input and O(n) per window length otherwise.
func Check(events []Event, key string, spec Spec) KeyReport {
	rep := KeyReport{Key: key, Limit: spec.Limit, PerNode: make(map[string]int)}
	var mine []Event
	for _, e := range events {
		if e.Key != key {
			continue
		}
		mine = append(mine, e)
		rep.PerNode[e.Node]++
	}
	if !slices.IsSortedFunc(mine, byTime) {
		slices.SortStableFunc(mine, byTime)
	}
	times := make([]int64, len(mine))
	nodes := make([]string, len(mine))
	for i, e := range mine {
		times[i], nodes[i] = e.At, e.Node
	}
	rep.Fairness = fairness(times, nodes)
	n := len(times)
	rep.Events = n
	if n > 0 {
		rep.First, rep.Last = times[0], times[n-1]
	}

	rep.RateEvents, rep.AchievedRate = achievedRate(times, spec.From, spec.To)
	if spec.Limit.Rate > 0 {
		rep.Utilisation = rep.AchievedRate / spec.Limit.Rate
	}

	windows := spec.Windows
	if windows == nil {
		windows = DefaultWindows()
	}
	for _, w := range windows {
		most, start := maxInWindow(times, w)
		bound := spec.Limit.Rate*w.Seconds() + float64(spec.Limit.Burst) + spec.Limit.Rate*spec.Delta.Seconds()
		rep.Windows = append(rep.Windows, WindowResult{
			Window:     w,
			MaxCount:   most,
			Bound:      bound,
			WorstStart: start,
			Over:       float64(most) > bound+overEpsilon*math.Max(1, math.Abs(bound)),
		})
	}
	return rep
}

func byTime(a, b Event) int { return cmp.Compare(a.At, b.At) }

// maxInWindow returns the largest number of times in any closed window
// [t, t+w] and the start of the earliest such window. A window holding the most events can
// be slid right until its start meets an event without losing any, so only
// windows starting at an event need be counted: a two-pointer sweep.
// times must be sorted.
func maxInWindow(times []int64, w time.Duration) (most int, start int64) {
	if w <= 0 {
		return 0, 0
	}
	j := 0
	for i, t := range times {
		if j < i {
			j = i
		}
		// t <= times[j], so the unsigned difference is exact even when
		// the signed one would overflow. <= because the window is closed.
		for j < len(times) && uint64(times[j])-uint64(t) <= uint64(w) {
			j++
		}
		if c := j - i; c > most {
			most, start = c, t
		}
	}
	return most, start
}

func achievedRate(times []int64, from, to int64) (int, float64) {
	n := len(times)
	if from == 0 && to == 0 {
		if n < 2 || times[n-1] == times[0] {
			return n, 0
		}
		return n, float64(n-1) / (float64(times[n-1]-times[0]) / 1e9)
	}
	if n == 0 {
		return 0, 0
	}
	if from == 0 {
		from = times[0]
	}
	if to == 0 {
		to = times[n-1] + 1
	}
	if to <= from {
		return 0, 0
	}
	lo, _ := slices.BinarySearch(times, from) // first >= from
	hi, _ := slices.BinarySearch(times, to)   // first >= to
	count := hi - lo
	return count, float64(count) / (float64(to-from) / 1e9)
}

// OK reports whether no window is over its bound.
func (r KeyReport) OK() bool {
	for _, w := range r.Windows {
		if w.Over {
			return false
		}
	}
	return true
}

// String returns a short summary: one line for the key, one for the spread
// over nodes (when there are several), one per window.
//
//	key=k events=200 rate=19.93/s (99.7% of 20) nodes: n1=70 n2=65 n3=65
//	  spread: longest gap n1=310ms n2=2.4s n3=250ms; 4 of 9 s with a node under half an even share
//	  W=500ms max=11 bound=11.10 ok
//	  W=1s max=31 bound=21.10 OVER at 2023-11-14T22:13:20.05Z (+50ms)
func (r KeyReport) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "key=%s events=%d rate=%.2f/s", r.Key, r.Events, r.AchievedRate)
	if r.Limit.Rate > 0 {
		fmt.Fprintf(&sb, " (%.1f%% of %g)", 100*r.Utilisation, r.Limit.Rate)
	}
	nodes := make([]string, 0, len(r.PerNode))
	for n := range r.PerNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	sb.WriteString(" nodes:")
	for _, n := range nodes {
		fmt.Fprintf(&sb, " %s=%d", n, r.PerNode[n])
	}
	if len(nodes) > 1 {
		sb.WriteString("\n  spread: longest gap")
		for _, n := range nodes {
			fmt.Fprintf(&sb, " %s=%v", n, r.Fairness.LongestGap[n].Round(time.Millisecond))
		}
		if r.Fairness.Seconds > 0 {
			fmt.Fprintf(&sb, "; %d of %d s with a node under half an even share", r.Fairness.Starved, r.Fairness.Seconds)
		}
	}
	for _, w := range r.Windows {
		fmt.Fprintf(&sb, "\n  W=%v max=%d bound=%.2f", w.Window, w.MaxCount, w.Bound)
		if !w.Over {
			sb.WriteString(" ok")
			continue
		}
		fmt.Fprintf(&sb, " OVER at %s (+%v)",
			time.Unix(0, w.WorstStart).UTC().Format(time.RFC3339Nano),
			time.Duration(w.WorstStart-r.First))
	}
	return sb.String()
}
