package wire

import (
	"math/rand/v2"
	"testing"
)

// TestLease_RestatedKeepsEverySlotInsideItsGrantedWindow: on one shared
// timeline, a lease granted at g and restated when its answer left (w),
// then placed by the receiver from the answer's arrival and its request's
// sending plus Held, puts every slot inside the window the grant gave it:
// not before g + Slot(i), not used after g + Slot(i) + grace. Restating
// past the first slot (a burst's, or one whose time passed while the
// answer waited) would break the second bound; the cut to Base prevents it.
func TestLease_RestatedKeepsEverySlotInsideItsGrantedWindow(t *testing.T) {
	const grace = int64(50e6)
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 100000 {
		sent := r.Int64N(1e9)
		entry := sent + r.Int64N(100e6) // the request's way there
		g := entry + r.Int64N(1e9)      // held on the leader
		w := g + r.Int64N(500e6)        // the answer waits to leave
		arrived := w + r.Int64N(100e6)  // the answer's way back
		l := Lease{Base: r.Int64N(3e9) - 1e9, Spacing: 1 + r.Int64N(1e9), Count: 1 + r.IntN(5), Held: g - entry}
		rl := l.Restated(w - g)
		if rl.Base < 0 && rl.Base != l.Base {
			t.Fatalf("trial %d: restated Base %d from %d: moved past the first slot", trial, rl.Base, l.Base)
		}
		from := sent + min(rl.Held, arrived-sent)
		for i := range l.Count {
			first, last := g+l.Slot(i), g+l.Slot(i)+grace
			at, useBy := arrived+rl.Slot(i), from+rl.Slot(i)+grace
			if at < first {
				t.Fatalf("trial %d slot %d: used from %d, granted from %d (lease %+v restated %+v)", trial, i, at, first, l, rl)
			}
			if useBy > last {
				t.Fatalf("trial %d slot %d: used by %d, granted until %d (lease %+v restated %+v)", trial, i, useBy, last, l, rl)
			}
		}
	}
}

// TestLease_RestatedGivesTheAnswersWaitBack: a slot in the future, whose
// answer waited 300 ms to leave, keeps its whole window at the receiver
// (without restating, that wait is transit and the window is gone).
func TestLease_RestatedGivesTheAnswersWaitBack(t *testing.T) {
	const grace = int64(50e6)
	l := Lease{Base: 800e6, Spacing: 1e9, Count: 1, Held: 0}
	sent, g := int64(0), int64(1e6)
	w, arrived := g+300e6, g+300e6+1e6
	window := func(l Lease) int64 {
		from := sent + min(l.Held, arrived-sent)
		return (from + l.Slot(0) + grace) - (arrived + l.Slot(0))
	}
	if got := window(l); got > 0 {
		t.Fatalf("not restated: a window of %v ns; the 300 ms wait should have closed it", got)
	}
	if got := window(l.Restated(w - g)); got < grace-3e6 {
		t.Fatalf("restated: a window of %d ns, want nearly UseGrace (%d)", got, grace)
	}
}
