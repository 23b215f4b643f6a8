package fsm

import (
	"bytes"
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

// BenchmarkSnapshot_100kTemplateKeys is the state of 100,000 keys made by
// one template, each with a horizon (every key used within the last
// minute): the snapshot's size (snapshot-bytes) and the time to write it
// and to restore it, which a node restarting from that snapshot pays.
func BenchmarkSnapshot_100kTemplateKeys(b *testing.B) {
	const keys, batch = 100_000, 1024
	s := New()
	if err := s.Apply(1, SetLimit{Key: "tenant:*", Limit: Limit{Rate: 1, Burst: 1}}); err != nil {
		b.Fatal(err)
	}
	idx := uint64(1)
	for from := 0; from < keys; from += batch {
		var c ExtendHorizons
		for i := from; i < min(from+batch, keys); i++ {
			c.Entries = append(c.Entries, HorizonEntry{Key: "tenant:" + strconv.Itoa(i), Ahead: 2 * time.Second})
		}
		idx++
		if err := s.Apply(idx, c); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			var w bytes.Buffer
			if _, err := s.Snapshot().WriteTo(&w); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data)), "snapshot-bytes")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			r := New()
			if err := r.Restore(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
			if r.HorizonCount() != keys {
				b.Fatalf("restored %d horizons, want %d", r.HorizonCount(), keys)
			}
		}
		b.ReportMetric(float64(len(data)), "snapshot-bytes")
	})
}
