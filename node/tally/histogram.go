package tally

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Histogram is a fixed-bucket histogram of durations, lock-free.
type Histogram struct {
	bounds []float64       // seconds
	counts []atomic.Uint64 // per bucket (not cumulative); the last is +Inf
	sumNs  atomic.Int64
}

// Snapshot is a snapshot of a histogram: Counts[i] is the number of
// observations <= Bounds[i] (cumulative); Count and Sum (seconds) cover
// every observation, those above the last bound included. (node/report's
// Histogram has the same fields and converts from it.)
type Snapshot struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// NewHistogram returns an empty histogram with the upper bounds (seconds,
// ascending) given.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe counts d in the first bucket whose bound is >= d.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(h.bounds, s) // first bound >= s
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot returns the counts so far.
func (h *Histogram) Snapshot() Snapshot {
	out := Snapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds))}
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if i < len(h.bounds) {
			out.Counts[i] = cum
		}
	}
	out.Count = cum
	out.Sum = math.Max(0, time.Duration(h.sumNs.Load()).Seconds())
	return out
}
