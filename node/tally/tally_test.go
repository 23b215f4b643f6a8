package tally

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// An observation counts in the first bucket whose bound is >= it (a value
// on a bound counts in that bound's bucket); the snapshot is cumulative,
// and Count and Sum include what lies above the last bound.
func TestHistogram_BucketBoundaries(t *testing.T) {
	h := NewHistogram([]float64{0.001, 0.01, 0.1})
	for _, d := range []time.Duration{
		0,                      // <= 0.001
		time.Millisecond,       // on the first bound
		time.Millisecond + 1,   // just above it
		10 * time.Millisecond,  // on the second
		50 * time.Millisecond,  // in the third
		100 * time.Millisecond, // on the third
		time.Second,            // above every bound
	} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if want := []uint64{2, 4, 6}; !slices.Equal(s.Counts, want) {
		t.Fatalf("counts = %v, want %v", s.Counts, want)
	}
	if s.Count != 7 {
		t.Fatalf("count = %d, want 7", s.Count)
	}
	want := (time.Millisecond*2 + 1 + 10*time.Millisecond + 150*time.Millisecond + time.Second).Seconds()
	if s.Sum != want {
		t.Fatalf("sum = %v, want %v", s.Sum, want)
	}
	if !slices.Equal(s.Bounds, []float64{0.001, 0.01, 0.1}) {
		t.Fatalf("bounds = %v", s.Bounds)
	}
}

func TestHistogram_EmptySnapshot(t *testing.T) {
	s := NewHistogram([]float64{1, 2}).Snapshot()
	if s.Count != 0 || s.Sum != 0 || !slices.Equal(s.Counts, []uint64{0, 0}) {
		t.Fatalf("empty snapshot = %+v", s)
	}
}

// Past its bound (max keys of its own), Keys counts further keys under the other key; keys it
// already counts keep their own counters, and Each walks them in order.
func TestKeys_BoundFoldsFurtherKeys(t *testing.T) {
	k := NewKeys(3, "(other)")
	for i := range 5 {
		k.Get(fmt.Sprintf("k%d", i)).Granted.Add(1)
	}
	k.Get("k1").Granted.Add(1)
	got := map[string]uint64{}
	var order []string
	k.Each(func(key string, c *Counter) {
		got[key] = c.Granted.Load()
		order = append(order, key)
	})
	if want := []string{"(other)", "k0", "k1", "k2"}; !slices.Equal(order, want) {
		t.Fatalf("keys = %v, want %v", order, want)
	}
	if got["k0"] != 1 || got["k1"] != 2 || got["k2"] != 1 || got["(other)"] != 2 {
		t.Fatalf("counts = %v", got)
	}
}

// Counts land in their own second; Series leaves out the current second
// and gives the last secs whole seconds, oldest first.
func TestHistory_PerSecondBins(t *testing.T) {
	var h History
	t0 := time.Unix(1_000_000, 0)
	h.Add("k", 2, t0)
	h.Add("k", 3, t0.Add(900*time.Millisecond)) // same second
	h.Add("k", 4, t0.Add(2*time.Second))
	h.Add("k", 5, t0.Add(3*time.Second+100*time.Millisecond)) // current, partial
	now := t0.Add(3*time.Second + 500*time.Millisecond)
	if got, want := h.Series("k", now, 4), []uint64{0, 5, 0, 4}; !slices.Equal(got, want) {
		t.Fatalf("series = %v, want %v", got, want)
	}
	if got := h.Rate("k", now, 4); got != 9.0/4 {
		t.Fatalf("rate = %v, want 2.25", got)
	}
	if got := h.Series("none", now, 3); !slices.Equal(got, []uint64{0, 0, 0}) {
		t.Fatalf("unknown key's series = %v", got)
	}
	if got := h.Series("k", now, HistorySeconds+10); len(got) != HistorySeconds-1 {
		t.Fatalf("series length = %d, want %d", len(got), HistorySeconds-1)
	}
	if got := h.Rate("k", now, 0); got != 0 {
		t.Fatalf("rate over 0s = %v", got)
	}
	if got := h.Keys(); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("keys = %v", got)
	}
}

// The ring reuses its slots: a second HistorySeconds later starts from
// zero, not from the count of the second it overwrites, and a gap of a
// whole ring or more clears everything.
func TestHistory_RingWrapAround(t *testing.T) {
	var h History
	t0 := time.Unix(2_000_000, 0)
	for i := range HistorySeconds {
		h.Add("k", 1, t0.Add(time.Duration(i)*time.Second))
	}
	// One ring later: the slot of t0 now belongs to t0+HistorySeconds.
	wrap := t0.Add(HistorySeconds * time.Second)
	h.Add("k", 7, wrap)
	s := h.Series("k", wrap.Add(time.Second), HistorySeconds-1)
	if s[len(s)-1] != 7 {
		t.Fatalf("newest second = %d, want 7 (not 1+7)", s[len(s)-1])
	}
	for i, c := range s[:len(s)-1] {
		if c != 1 {
			t.Fatalf("second %d = %d, want 1", i, c)
		}
	}
	// An old count (more than a ring ago) is not added.
	h.Add("k", 100, t0)
	if s2 := h.Series("k", wrap.Add(time.Second), HistorySeconds-1); !slices.Equal(s, s2) {
		t.Fatal("a count older than the ring changed the series")
	}
	// A gap of a whole ring clears it.
	later := wrap.Add(2 * HistorySeconds * time.Second)
	for i, c := range h.Series("k", later, HistorySeconds-1) {
		if c != 0 {
			t.Fatalf("after a long gap, second %d = %d", i, c)
		}
	}
}
