package fsm

import (
	"strconv"
	"testing"
	"time"
)

func horizons100() ExtendHorizons {
	es := make([]HorizonEntry, 100)
	for i := range es {
		es[i] = HorizonEntry{Key: "provider:acme/cred:" + strconv.Itoa(i), Ahead: 2*time.Second + time.Duration(i)}
	}
	return ExtendHorizons{Entries: es}
}

func BenchmarkEncode_ExtendHorizons100(b *testing.B) {
	c := horizons100()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode_ExtendHorizons100(b *testing.B) {
	enc := mustEncode(b, horizons100())
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkState_ApplySetLimit(b *testing.B) {
	s := New()
	c := SetLimit{Key: "google-images", Limit: Limit{Rate: 10, Burst: 5}}
	idx := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		idx++
		if err := s.Apply(idx, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkState_ApplyExtendHorizons100(b *testing.B) {
	s := New()
	c := horizons100()
	idx := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		idx++
		if err := s.Apply(idx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkState_HorizonParallel measures the read path the node's pacer
// may take on every grant, under contention.
func BenchmarkState_HorizonParallel(b *testing.B) {
	s := New()
	if err := s.Apply(1, horizons100()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := s.Horizon("provider:acme/cred:42"); !ok {
				b.Fatal("missing horizon")
			}
		}
	})
}

func BenchmarkSnapshot_WriteTo10k(b *testing.B) {
	s := New()
	idx := uint64(0)
	for i := range 10000 {
		idx++
		key := "key-" + strconv.Itoa(i)
		if err := s.Apply(idx, SetLimit{Key: key, Limit: Limit{Rate: 10, Burst: 5}}); err != nil {
			b.Fatal(err)
		}
		idx++
		if err := s.Apply(idx, ExtendHorizons{Entries: []HorizonEntry{{Key: key, Ahead: time.Second}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Snapshot().WriteTo(discard{}); err != nil {
			b.Fatal(err)
		}
	}
}
