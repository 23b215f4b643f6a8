package tally

import (
	"sort"
	"sync"
	"time"
)

// HistorySeconds is how far back a History keeps per-second event counts.
const HistorySeconds = 300

// History counts events per key per second of the clock it is given, for
// the last HistorySeconds. Adding is one short critical section per grant
// (not per event). The zero value is empty and ready to use.
type History struct {
	mu   sync.Mutex
	keys map[string]*ring
}

type ring struct {
	counts [HistorySeconds]uint64
	last   int64 // the unix second counts[last%HistorySeconds] belongs to
}

func (r *ring) advance(sec int64) {
	if sec <= r.last {
		return
	}
	if sec-r.last >= HistorySeconds {
		r.counts = [HistorySeconds]uint64{}
	} else {
		for s := r.last + 1; s <= sec; s++ {
			r.counts[s%HistorySeconds] = 0
		}
	}
	r.last = sec
}

// Add counts n events of key in now's second.
func (h *History) Add(key string, n int, now time.Time) {
	sec := now.Unix()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = make(map[string]*ring)
	}
	r := h.keys[key]
	if r == nil {
		r = &ring{last: sec}
		h.keys[key] = r
	}
	r.advance(sec)
	if sec > r.last-HistorySeconds {
		r.counts[sec%HistorySeconds] += uint64(n)
	}
}

// Series returns the counts of the last secs whole seconds before now's
// second (oldest first): the current, partial second is left out. secs
// is at most HistorySeconds-1.
func (h *History) Series(key string, now time.Time, secs int) []uint64 {
	secs = min(max(secs, 0), HistorySeconds-1)
	out := make([]uint64, secs)
	sec := now.Unix()
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.keys[key]
	if r == nil {
		return out
	}
	r.advance(sec)
	for i := range secs {
		out[i] = r.counts[(sec-int64(secs)+int64(i))%HistorySeconds]
	}
	return out
}

// Rate is the mean events per second over the last secs whole seconds.
func (h *History) Rate(key string, now time.Time, secs int) float64 {
	s := h.Series(key, now, secs)
	if len(s) == 0 {
		return 0
	}
	var sum uint64
	for _, c := range s {
		sum += c
	}
	return float64(sum) / float64(len(s))
}

// Keys returns every key counted, sorted.
func (h *History) Keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.keys))
	for k := range h.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
