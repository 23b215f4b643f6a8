package node

import (
	"sort"
	"sync"
	"time"
)

// HistorySeconds is how far back a node keeps per-second event counts.
const HistorySeconds = 300

// history counts events per key per second of this host's clock, for the
// last HistorySeconds: what status, the metrics page and its chart show.
// Adding is one short critical section per grant (not per event).
type history struct {
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

func (h *history) add(key string, n int, now time.Time) {
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

// series returns the counts of the last secs whole seconds before now's
// second (oldest first): the current, partial second is left out.
func (h *history) series(key string, now time.Time, secs int) []uint64 {
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

// rate is the mean events per second over the last secs whole seconds.
func (h *history) rate(key string, now time.Time, secs int) float64 {
	s := h.series(key, now, secs)
	if len(s) == 0 {
		return 0
	}
	var sum uint64
	for _, c := range s {
		sum += c
	}
	return float64(sum) / float64(len(s))
}

func (h *history) keyList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.keys))
	for k := range h.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// KeyHistory is a key's per-second counts for the last Seconds whole
// seconds before End (oldest first). Admitted: events this node granted to
// its own callers. Granted: slots this node granted as leader to the whole
// fleet (leased slots included, whether used or dropped), zero while it
// follows.
type KeyHistory struct {
	Key      string    `json:"key"`
	End      time.Time `json:"end"`
	Admitted []uint64  `json:"admitted"`
	Granted  []uint64  `json:"granted"`
}

// History returns the per-second history of every key this node has seen
// events of, over the last secs seconds (at most HistorySeconds-1).
func (n *Node) History(secs int) []KeyHistory {
	now := time.Now()
	end := now.Truncate(time.Second)
	seen := map[string]bool{}
	var keys []string
	for _, k := range append(n.admittedHist.keyList(), n.grantedHist.keyList()...) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]KeyHistory, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeyHistory{Key: k, End: end, Admitted: n.admittedHist.series(k, now, secs), Granted: n.grantedHist.series(k, now, secs)})
	}
	return out
}
