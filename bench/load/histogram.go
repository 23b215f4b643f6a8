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
type Histogram struct {
	counts [histBuckets]atomic.Uint64
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
)

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
	h.counts[histIndex(v)].Add(1)
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
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
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
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			low, width := histBounds(i)
			return time.Duration(min(low+width/2, h.max.Load()))
		}
	}
	return h.Max() // counts raced ahead of n: the last value is the max
}
