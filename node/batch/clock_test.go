package batch

import (
	"math/rand/v2"
	"testing"
)

// Whatever the delays of each exchange, the bounds always hold the true
// offset, and after a fast exchange they stay tight for the slow ones that
// follow (what lets a late answer keep its slots).
func TestClockBounds_HoldTheOffsetAndStayTight(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		theta := r.Int64N(2e12) - 1e12 // member = leader + theta
		var c clockBounds
		now := int64(1e12)
		for i := range 300 {
			sent := now
			out, back := 20e3+r.Int64N(200e6), 20e3+r.Int64N(200e6) // the ways there and back
			if i%50 == 7 {
				out, back = 20e3, 20e3 // now and then a fast one
			}
			recv := sent + out - theta
			answered := recv + r.Int64N(50e6)
			arrived := answered + theta + back
			c.observe("l", 1, sent, recv, answered, arrived)
			lo, hi := c.now(arrived)
			if lo > theta || hi < theta {
				t.Fatalf("trial %d exchange %d: bounds [%d, %d] miss the offset %d", trial, i, lo, hi, theta)
			}
			if i%50 == 8 && hi-lo > 1e6 {
				t.Fatalf("trial %d exchange %d: bounds %d ns wide after a fast exchange", trial, i, hi-lo)
			}
			now = arrived + r.Int64N(5e6)
		}
	}
}

// Another leader, or a restart of it (a new epoch, a new clock), starts
// the bounds over: the old ones would misplace its readings.
func TestClockBounds_NewClockStartsOver(t *testing.T) {
	var c clockBounds
	c.observe("l", 1, 0, 100, 100, 10) // offset in [-100, -90]
	c.observe("l", 2, 20, 5, 5, 30)    // restarted: offset in [15, 25]
	if lo, hi := c.now(30); lo != 15 || hi != 25 {
		t.Fatalf("after a restart: [%d, %d], want this exchange's [15, 25]", lo, hi)
	}
	c.observe("m", 2, 40, 500, 500, 50) // another leader: [-460, -450]
	if lo, hi := c.now(50); lo != -460 || hi != -450 {
		t.Fatalf("another leader: [%d, %d], want [-460, -450]", lo, hi)
	}
}

// Bounds widen with time by maxDrift, so clocks that run apart stay
// inside them.
func TestClockBounds_WidenByTheDrift(t *testing.T) {
	var c clockBounds
	c.observe("l", 1, 0, 0, 0, 0)
	lo, hi := c.now(1e9)
	if want := int64(maxDrift * 1e9); lo != -want || hi != want {
		t.Fatalf("a second later: [%d, %d], want ±%d", lo, hi, want)
	}
}
