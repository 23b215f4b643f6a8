package load

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestHistIndex_Bounds(t *testing.T) {
	t.Parallel()
	// Every value lies in its bucket, buckets are contiguous and ordered.
	prevIdx := -1
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 1 << 20, 123456789, 1 << 45, 1<<46 - 1} {
		i := histIndex(v)
		low, width := histBounds(i)
		if v < low || v >= low+width {
			if i != histBuckets-1 {
				t.Errorf("value %d in bucket %d = [%d, %d)", v, i, low, low+width)
			}
		}
		if i < prevIdx {
			t.Errorf("value %d: bucket %d before the previous value's %d", v, i, prevIdx)
		}
		prevIdx = i
	}
	for i := 1; i < histBuckets; i++ {
		l0, w0 := histBounds(i - 1)
		l1, _ := histBounds(i)
		if l0+w0 != l1 {
			t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i-1, l0+w0, i, l1)
		}
	}
	if histIndex(-5) != 0 {
		t.Errorf("negative value: bucket %d", histIndex(-5))
	}
}

func TestHistogram_QuantileExact(t *testing.T) {
	t.Parallel()
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram is not all zero")
	}
	// Below 64ns every value has its own bucket: quantiles are exact.
	for v := 1; v <= 50; v++ {
		h.Record(time.Duration(v))
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 25}, {0.99, 50}, {0.02, 1}, {0.01, 1}, {1, 50}, {0.001, 1},
	}
	for _, tc := range tests {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if h.Mean() != 25 || h.Max() != 50 || h.Count() != 50 { // (1+...+50)/50 = 25.5, integer ns
		t.Errorf("mean %v max %v count %d", h.Mean(), h.Max(), h.Count())
	}
}

func TestHistogram_QuantileRelativeError(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []int64
	for range 100000 {
		// Log-uniform from 100ns to 100ms.
		v := int64(100 * math.Pow(10, rng.Float64()*6))
		vals = append(vals, v)
		h.Record(time.Duration(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := float64(vals[int(q*float64(len(vals)))-1])
		got := float64(h.Quantile(q))
		if rel := (got - exact) / exact; rel > 1.0/64 || rel < -1.0/64 {
			t.Errorf("Quantile(%v) = %v, exact %v: relative error %.4f > 1/64", q, got, exact, rel)
		}
	}
	if h.Max() != time.Duration(vals[len(vals)-1]) {
		t.Errorf("max %v, want %v", h.Max(), vals[len(vals)-1])
	}
	// The top quantile never reads above the largest value.
	if h.Quantile(1) > h.Max() {
		t.Errorf("Quantile(1) %v above the max %v", h.Quantile(1), h.Max())
	}
}

func TestHistogram_Concurrent(t *testing.T) {
	t.Parallel()
	var h Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(time.Duration(g*1000 + i))
			}
		})
	}
	wg.Wait()
	if h.Count() != 8000 || h.Max() != 7999 {
		t.Errorf("count %d max %v", h.Count(), h.Max())
	}
}

// TestHistogram_Sparse: a histogram holds the buckets of the powers of two
// its values fall in, not all of them (10,000 keys' worth of whole ones
// were 210 MB of an agent's heap), and merging keeps it so.
func TestHistogram_Sparse(t *testing.T) {
	t.Parallel()
	held := func(h *Histogram) (n int) {
		for i := range h.groups {
			if h.groups[i].Load() != nil {
				n++
			}
		}
		return n
	}
	var h Histogram
	if held(&h) != 0 {
		t.Fatalf("an empty histogram holds %d groups", held(&h))
	}
	for v := 100 * time.Microsecond; v < 120*time.Microsecond; v += time.Microsecond {
		h.Record(v) // 2^16..2^17 ns: one power of two
	}
	h.Record(3 * time.Second)
	if got := held(&h); got != 2 {
		t.Errorf("values in two powers of two: %d groups held, want 2", got)
	}
	var m Histogram
	m.Merge(&h)
	if got := held(&m); got != 2 {
		t.Errorf("merged: %d groups held, want 2", got)
	}
	if m.Quantile(1) != 3*time.Second || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merged quantiles %v %v, want %v %v", m.Quantile(1), m.Quantile(0.5), 3*time.Second, h.Quantile(0.5))
	}
	if size := unsafe.Sizeof(h) + 2*unsafe.Sizeof(histGroup{}); size > 2048 {
		t.Errorf("%d bytes for values in two powers of two", size)
	}
}

func TestHistogram_Merge(t *testing.T) {
	t.Parallel()
	var a, b, all Histogram
	for v := range 1000 {
		all.Record(time.Duration(v * 1000))
		if v%3 == 0 {
			a.Record(time.Duration(v * 1000))
		} else {
			b.Record(time.Duration(v * 1000))
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	for _, q := range []float64{0.01, 0.5, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("Quantile(%v): merged %v, whole %v", q, m.Quantile(q), all.Quantile(q))
		}
	}
	if m.Count() != all.Count() || m.Mean() != all.Mean() || m.Max() != all.Max() {
		t.Errorf("merged count %d mean %v max %v, whole %d %v %v", m.Count(), m.Mean(), m.Max(), all.Count(), all.Mean(), all.Max())
	}
}

func TestKeyLoad_SetLatency(t *testing.T) {
	t.Parallel()
	var h Histogram
	for range 99 {
		h.Record(10)
	}
	h.Record(time.Millisecond)
	var k KeyLoad
	k.SetLatency(&h)
	if k.Calls != 100 || k.P50 != 10 || k.P99 != 10 || k.Max != int64(time.Millisecond) {
		t.Errorf("%+v", k)
	}
	if k.P999 < int64(time.Millisecond)*63/64 {
		t.Errorf("p99.9 %d, want about 1ms", k.P999)
	}
	k.From, k.To = 1e9, 3e9
	if k.Seconds() != 2 {
		t.Errorf("seconds %v", k.Seconds())
	}
}

// BenchmarkHistogram_Record is the measuring cost the load generator adds
// to each reservation it times (besides two clock readings): each caller
// records to its own histogram ("own"); "shared" is one histogram for all,
// which the load generator avoids.
func BenchmarkHistogram_Record(b *testing.B) {
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			h := new(Histogram)
			d := time.Duration(200)
			for pb.Next() {
				h.Record(d)
				d = (d * 7) % 100000
			}
		})
	})
	b.Run("shared", func(b *testing.B) {
		var h Histogram
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			d := time.Duration(200)
			for pb.Next() {
				h.Record(d)
				d = (d * 7) % 100000
			}
		})
	})
}
