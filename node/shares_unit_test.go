package node

import (
	"testing"
	"time"
)

// F for an interval that reaches past the last renewal's hold is 0, and
// that answer must not stick to other intervals: a slow key's lease asks
// for slots a second or more ahead, and its F = 0 was cached for every
// interval, so every other key's leases were refused until the next
// renewal (issue "Ten keys, a quarter of the rate").
func TestShares_FractionPastTheHoldDoesNotStick(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := newShares(clk.now, 2*time.Second)
	s.lead(threeMembers())
	for _, id := range []string{"a", "b", "c"} {
		s.renewed(id, clk.now(), clk.now(), shareAnswer{Fraction: 1.0 / 3})
	}
	// Held for slots in [1s, 3s).
	if f := s.fraction(clk.at(1100*time.Millisecond), clk.at(1200*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F inside the hold = %v, want 1", f)
	}
	if f := s.fraction(clk.at(1100*time.Millisecond), clk.at(3500*time.Millisecond)); !near(f, 0) {
		t.Fatalf("F for an interval past the hold = %v, want 0", f)
	}
	for _, iv := range [][2]time.Duration{
		{1100 * time.Millisecond, 1200 * time.Millisecond},
		{1500 * time.Millisecond, 2900 * time.Millisecond},
		{time.Second, 1001 * time.Millisecond},
	} {
		if f := s.fraction(clk.at(iv[0]), clk.at(iv[1])); !near(f, 1) {
			t.Errorf("F for [%v, %v] after asking past the hold = %v, want 1", iv[0], iv[1], f)
		}
	}
	// Past the hold every interval is unheld, cached or not.
	for _, iv := range [][2]time.Duration{
		{3 * time.Second, 3100 * time.Millisecond},
		{4 * time.Second, 5 * time.Second},
		{2900 * time.Millisecond, 3 * time.Second},
	} {
		if f := s.fraction(clk.at(iv[0]), clk.at(iv[1])); !near(f, 0) {
			t.Errorf("F for [%v, %v] = %v, want 0", iv[0], iv[1], f)
		}
	}
	// Inside again after a run of cached answers past it.
	if f := s.fraction(clk.at(2*time.Second), clk.at(2100*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F inside the hold after answers past it = %v, want 1", f)
	}
}
