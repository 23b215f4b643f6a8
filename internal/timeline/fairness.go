package timeline

import (
	"slices"
	"time"
)

// Fairness says how evenly a key's events were spread over the nodes that
// admitted them. It means something when every node wanted the key's
// events all along (a load generator at saturation): then a long gap is a
// node that waited while the others admitted.
type Fairness struct {
	// LongestGap is, per node, the longest stretch of the key's span
	// [First, Last] without an event of the node: from First to its first
	// event, between two of its events, or from its last event to Last.
	LongestGap map[string]time.Duration
	// Seconds counts the whole seconds of the span (from First); Starved
	// counts those in which some node admitted less than half of an even
	// share of that second's events (the second's events / the nodes).
	Seconds, Starved int
}

// fairness measures the events of one key (times sorted, nodes parallel).
func fairness(times []int64, nodes []string) Fairness {
	f := Fairness{LongestGap: map[string]time.Duration{}}
	if len(times) == 0 {
		return f
	}
	first, last := times[0], times[len(times)-1]
	prev := map[string]int64{}
	for i, t := range times {
		n := nodes[i]
		from, ok := prev[n]
		if !ok {
			from = first
		}
		f.LongestGap[n] = max(f.LongestGap[n], time.Duration(t-from))
		prev[n] = t
	}
	for n, t := range prev {
		f.LongestGap[n] = max(f.LongestGap[n], time.Duration(last-t))
	}

	ids := make([]string, 0, len(prev))
	for n := range prev {
		ids = append(ids, n)
	}
	slices.Sort(ids)
	f.Seconds = int((last - first) / int64(time.Second))
	counts := make(map[string]int, len(ids))
	i := 0
	for s := range f.Seconds {
		end := first + int64(s+1)*int64(time.Second)
		clear(counts)
		total := 0
		for ; i < len(times) && times[i] < end; i++ {
			counts[nodes[i]]++
			total++
		}
		even := float64(total) / float64(len(ids))
		for _, n := range ids {
			if float64(counts[n]) < even/2 {
				f.Starved++
				break
			}
		}
	}
	return f
}
