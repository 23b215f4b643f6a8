package load

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram counts durations in log-linear buckets: exact below 64ns, then
// 64 buckets per power of two, so a percentile read from it is within
// 1/64 (1.6%) of the true value. The zero value is ready to use; Record is
// safe for concurrent use (atomic adds, no lock). Callers that record at
// millions per second each keep their own and Merge them at the end, so
// that they do not contend for its cache lines.
//
// The buckets of each power of two are allocated when a value first falls
// in it: a histogram costs about 0.4 KB plus 0.5 KB per power of two its
// values span, not the 21 KB of every bucket. A load of 10,000 keys from
// one process keeps one per key and worker; whole, they were 210 MB of
// live heap, and the agent's collections of it were pauses its own workers
// (the measurement) paid for.
type Histogram struct {
	groups [histGroups]atomic.Pointer[histGroup]
	n      atomic.Uint64
	sum    atomic.Uint64 // ns; overflows only after 584 years of latency
	max    atomic.Int64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // buckets per power of two
	// histMaxExp covers values up to 2^(histMaxExp+histSubBits) ns, about
	// 19 hours; larger values land in the last bucket.
	histMaxExp  = 40
	histBuckets = (histMaxExp + 1) * histSub
	histGroups  = histBuckets / histSub
)

// histGroup is the buckets of one power of two (of the values below 64ns
// for the first).
type histGroup [histSub]atomic.Uint64

// bucket returns bucket i's counter, allocating its group if need be.
func (h *Histogram) bucket(i int) *atomic.Uint64 {
	p := &h.groups[i/histSub]
	g := p.Load()
	if g == nil {
		p.CompareAndSwap(nil, new(histGroup))
		g = p.Load() // ours, or the one another recorder installed first
	}
	return &g[i%histSub]
}

// histIndex maps a value in ns to its bucket.
func histIndex(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // v >> e is in [64, 128)
	if e >= histMaxExp {
		return histBuckets - 1
	}
	return (e+1)*histSub + int(v>>e) - histSub
}

// histBounds returns the smallest value of bucket i and its width.
func histBounds(i int) (low, width int64) {
	if i < histSub {
		return int64(i), 1
	}
	e := i/histSub - 1
	return int64(i%histSub+histSub) << e, 1 << e
}

// Record counts one duration.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	h.bucket(histIndex(v)).Add(1)
	h.n.Add(1)
	if v > 0 {
		h.sum.Add(uint64(v))
	}
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Merge adds o's counts to h. It is meant for summing the shards of a
// measurement once they are no longer recorded to.
func (h *Histogram) Merge(o *Histogram) {
	for gi := range o.groups {
		g := o.groups[gi].Load()
		if g == nil {
			continue
		}
		for j := range g {
			if c := g[j].Load(); c != 0 {
				h.bucket(gi*histSub + j).Add(c)
			}
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	for {
		m, om := h.max.Load(), o.max.Load()
		if om <= m || h.max.CompareAndSwap(m, om) {
			return
		}
	}
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Mean returns the mean duration, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Max returns the largest duration recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the q-quantile (0 < q <= 1) by the nearest-rank rule:
// the value of rank ceil(q*n) in sorted order, read as the middle of its
// bucket (exact below 64ns) and never above the largest value recorded.
// It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for gi := range h.groups {
		g := h.groups[gi].Load()
		if g == nil {
			continue
		}
		for j := range g {
			seen += g[j].Load()
			if seen >= rank {
				low, width := histBounds(gi*histSub + j)
				return time.Duration(min(low+width/2, h.max.Load()))
			}
		}
	}
	return h.Max() // counts raced ahead of n: the last value is the max
}
