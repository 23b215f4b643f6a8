package timeline

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// benchEvents returns n events of key "k" from three nodes, roughly paced
// at 1000/s with jitter, in time order, plus a tenth as many of key "x".
func benchEvents(n int) []Event {
	rng := rand.New(rand.NewPCG(5, 6))
	nodes := []string{"n1", "n2", "n3"}
	evs := make([]Event, 0, n+n/10)
	at := t0
	for i := range n {
		at += int64(time.Millisecond) + rng.Int64N(int64(time.Millisecond)) - int64(time.Millisecond)/2
		evs = append(evs, Event{At: at, Node: nodes[i%3], Key: "k"})
		if i%10 == 0 {
			evs = append(evs, Event{At: at, Node: nodes[i%3], Key: "x"})
		}
	}
	return evs
}

func BenchmarkCheck_1e6(b *testing.B) {
	evs := benchEvents(1_000_000)
	spec := Spec{Limit: Limit{Rate: 1000, Burst: 10}} // four default windows
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rep := Check(evs, "k", spec); rep.Events != 1_000_000 {
				b.Fatal(rep.Events)
			}
		}
	})
	b.Run("shuffled", func(b *testing.B) {
		shuffled := append([]Event(nil), evs...)
		rand.New(rand.NewPCG(7, 8)).Shuffle(len(shuffled), func(i, j int) {
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		})
		b.ReportAllocs()
		for b.Loop() {
			Check(shuffled, "k", spec)
		}
	})
}

func BenchmarkParse_1e6(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteEvents(&buf, benchEvents(1_000_000)); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriter_Record(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		w, err := NewWriter(filepath.Join(b.TempDir(), "t"), "node-1")
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		at := time.Unix(0, t0)
		b.ReportAllocs()
		for b.Loop() {
			if err := w.Record("provider:acme/cred:42", at); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		w, err := NewWriter(filepath.Join(b.TempDir(), "t"), "node-1")
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := w.Record("provider:acme/cred:42", time.Unix(0, t0+n.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
