package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
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
		s.renewed(id, clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
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

// Ten fractions of 0.1 sum to 1 only up to rounding: with all ten unheld
// F is 0, not 1.1e-16 (which stretched the emission interval past int64).
func TestShares_FractionSnapsRounding(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := newShares(clk.now, 2*time.Second)
	var ms []fsm.Member
	for i := range 10 {
		ms = append(ms, fsm.Member{ID: fmt.Sprintf("m%d", i), Fraction: 0.1})
	}
	s.lead(ms)
	if f := s.fraction(clk.now(), clk.now()); f != 0 {
		t.Fatalf("F with every share unheld = %v, want exactly 0", f)
	}
	for _, m := range ms {
		s.renewed(m.ID, clk.now(), clk.now(), wire.ShareAnswer{Fraction: m.Fraction})
	}
	if f := s.fraction(clk.now(), clk.now()); f != 1 {
		t.Fatalf("F with every share held = %v, want exactly 1", f)
	}
}

// BenchmarkSharesFraction is F on the lease path, which a leader reads
// for every lease: keys whose first slot is near (inside the last
// renewal's reach: cached) and, mixed in, slow keys whose slots lie past
// the reach (F = 0: not cacheable, computed over every member). Before the
// fix the mixed pattern returned 0 for the near keys too (it fails here);
// the ns/op of "mixed" against "near" is what the fix costs.
func BenchmarkSharesFraction(b *testing.B) {
	for _, members := range []int{3, 30} {
		for _, mixed := range []bool{false, true} {
			name := fmt.Sprintf("members=%d/near", members)
			if mixed {
				name = fmt.Sprintf("members=%d/mixed", members)
			}
			b.Run(name, func(b *testing.B) {
				clk := &fakeClock{t: int64(time.Second)}
				s := newShares(clk.now, 2*time.Second)
				var ms []fsm.Member
				for i := range members {
					ms = append(ms, fsm.Member{ID: fmt.Sprintf("m%d", i), Fraction: 1 / float64(members)})
				}
				s.lead(ms)
				for _, m := range ms {
					s.renewed(m.ID, clk.now(), clk.now(), wire.ShareAnswer{Fraction: m.Fraction})
				}
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					now := clk.t + int64(i%1000)*int64(time.Microsecond)
					if mixed && i%2 == 1 {
						if f := s.fraction(now, now+int64(2500*time.Millisecond)); f != 0 {
							b.Fatalf("F past the reach = %v", f)
						}
						continue
					}
					if f := s.fraction(now, now+int64(500*time.Millisecond)); f != 1 {
						b.Fatalf("F inside the reach = %v, want 1", f)
					}
				}
			})
		}
	}
}
