package shares

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// fakeClock is a node clock the test moves by hand.
type fakeClock struct{ t int64 }

func (c *fakeClock) now() int64               { return c.t }
func (c *fakeClock) add(d time.Duration)      { c.t += int64(d) }
func (c *fakeClock) at(d time.Duration) int64 { return int64(d) }

func threeMembers() []fsm.Member {
	return []fsm.Member{{ID: "a", Fraction: 1.0 / 3}, {ID: "b", Fraction: 1.0 / 3}, {ID: "c", Fraction: 1.0 / 3}}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A released member's fraction counts for the leader from the release time
// on, not before; a renewal answer undoes the release; forgetting follows
// the release time.
func TestShares_ReleaseCountsFromItsTime(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	ttl := 2 * time.Second
	s := New(clk.now, ttl)
	s.Lead(threeMembers())
	// a and b answer at q = 1s: held for slots in [1s, 3s); c is silent.
	for _, id := range []string{"a", "b"} {
		s.Renewed(id, clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	}
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F with c silent = %v, want 2/3", f)
	}
	// c is fenced: its fraction counts from 2s on.
	s.Release("c", clk.at(2*time.Second))
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F before the release time = %v, want 2/3", f)
	}
	if f := s.Fraction(clk.at(1900*time.Millisecond), clk.at(2100*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F for slots straddling the release time = %v, want 2/3", f)
	}
	if f := s.Fraction(clk.at(2*time.Second), clk.at(2500*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F after the release time = %v, want 1", f)
	}
	// An earlier release wins; a later one does not postpone it.
	s.Release("c", clk.at(5*time.Second))
	if f := s.Fraction(clk.at(2*time.Second), clk.at(2500*time.Millisecond)); !near(f, 1) {
		t.Fatalf("a later release postponed the first: F = %v", f)
	}
	if got := s.Released(clk.at(1999 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("released before its time: %v", got)
	}
	if got := s.Released(clk.at(2 * time.Second)); len(got) != 1 || got[0] != "c" {
		t.Fatalf("released at its time = %v, want [c]", got)
	}
	// c answers again (it was alive): held by the normal rule, not
	// released: counted only until q + TTL.
	clk.add(2 * time.Second) // now 3s
	s.Renewed("c", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	if s.IsReleased("c") {
		t.Fatal("a renewal answer did not clear the release")
	}
	// a and b lapsed at 3s (renewed at 1s with TTL 2s); c is held from 3s.
	if f := s.Fraction(clk.at(3*time.Second), clk.at(3500*time.Millisecond)); !near(f, 1.0/3) {
		t.Fatalf("F after c's renewal = %v, want 1/3", f)
	}
	if f := s.Fraction(clk.at(5*time.Second), clk.at(5500*time.Millisecond)); !near(f, 0) {
		t.Fatalf("F past every share = %v, want 0", f)
	}
}

// A leaving member's answer to a renewal that crossed its leave request
// keeps the release: the leader counts its fraction and forgets it. (The
// rolling-replace churn tests lost a leaving leader's fraction this way:
// the successor's first renewal round reached it after the leave.)
func TestShares_DepartingAnswerKeepsTheRelease(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, time.Second)
	s.Lead(threeMembers())
	q := clk.now()
	s.Release("c", clk.now())
	clk.add(10 * time.Millisecond)
	s.Renewed("c", q, clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3, Departing: true})
	if !s.IsReleased("c") {
		t.Fatal("a departing member's renewal answer undid its release")
	}
	if got := s.Released(clk.now()); len(got) != 1 || got[0] != "c" {
		t.Fatalf("released = %v, want [c]", got)
	}
	// A new incarnation joining gossip under the same id ends the release
	// too: reclaim must not remove it from raft again.
	s.Release("b", clk.now())
	s.Rejoined("b")
	if s.IsReleased("b") {
		t.Fatal("a rejoined member is still released")
	}
	// The same answer from a member that is not leaving clears it (it was
	// fenced or reaped and is alive).
	s.Renewed("c", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	if s.IsReleased("c") {
		t.Fatal("a staying member's renewal answer did not clear its release")
	}
}

// overdue lists silent members whose share lapsed, never released ones,
// never the leader itself.
func TestShares_OverdueSkipsReleasedAndSelf(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, time.Second)
	s.Lead(threeMembers())
	s.Renewed("a", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	clk.add(500 * time.Millisecond)
	if got := s.Overdue("a", 0); len(got) != 2 {
		t.Fatalf("overdue = %v, want b and c (never answered)", got)
	}
	s.Release("b", clk.now())
	if got := s.Overdue("a", 0); len(got) != 1 || got[0] != "c" {
		t.Fatalf("overdue = %v, want [c]", got)
	}
	if got := s.Overdue("a", time.Second); len(got) != 0 {
		t.Fatalf("overdue after 1s = %v, want none yet", got)
	}
	clk.add(time.Second)
	if silent, lapsed := s.Silence("c"); !lapsed || silent != 1500*time.Millisecond {
		t.Fatalf("silence(c) = %v, %v; want 1.5s, lapsed", silent, lapsed)
	}
}

// F for an interval that reaches past the last renewal's hold is 0, and
// that answer must not stick to other intervals: a slow key's lease asks
// for slots a second or more ahead, and its F = 0 was cached for every
// interval, so every other key's leases were refused until the next
// renewal (issue "Ten keys, a quarter of the rate").
func TestShares_FractionPastTheHoldDoesNotStick(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, 2*time.Second)
	s.Lead(threeMembers())
	for _, id := range []string{"a", "b", "c"} {
		s.Renewed(id, clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	}
	// Held for slots in [1s, 3s).
	if f := s.Fraction(clk.at(1100*time.Millisecond), clk.at(1200*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F inside the hold = %v, want 1", f)
	}
	if f := s.Fraction(clk.at(1100*time.Millisecond), clk.at(3500*time.Millisecond)); !near(f, 0) {
		t.Fatalf("F for an interval past the hold = %v, want 0", f)
	}
	for _, iv := range [][2]time.Duration{
		{1100 * time.Millisecond, 1200 * time.Millisecond},
		{1500 * time.Millisecond, 2900 * time.Millisecond},
		{time.Second, 1001 * time.Millisecond},
	} {
		if f := s.Fraction(clk.at(iv[0]), clk.at(iv[1])); !near(f, 1) {
			t.Errorf("F for [%v, %v] after asking past the hold = %v, want 1", iv[0], iv[1], f)
		}
	}
	// Past the hold every interval is unheld, cached or not.
	for _, iv := range [][2]time.Duration{
		{3 * time.Second, 3100 * time.Millisecond},
		{4 * time.Second, 5 * time.Second},
		{2900 * time.Millisecond, 3 * time.Second},
	} {
		if f := s.Fraction(clk.at(iv[0]), clk.at(iv[1])); !near(f, 0) {
			t.Errorf("F for [%v, %v] = %v, want 0", iv[0], iv[1], f)
		}
	}
	// Inside again after a run of cached answers past it.
	if f := s.Fraction(clk.at(2*time.Second), clk.at(2100*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F inside the hold after answers past it = %v, want 1", f)
	}
}

// Ten fractions of 0.1 sum to 1 only up to rounding: with all ten unheld
// F is 0, not 1.1e-16 (which stretched the emission interval past int64).
func TestShares_FractionSnapsRounding(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, 2*time.Second)
	var ms []fsm.Member
	for i := range 10 {
		ms = append(ms, fsm.Member{ID: fmt.Sprintf("m%d", i), Fraction: 0.1})
	}
	s.Lead(ms)
	if f := s.Fraction(clk.now(), clk.now()); f != 0 {
		t.Fatalf("F with every share unheld = %v, want exactly 0", f)
	}
	for _, m := range ms {
		s.Renewed(m.ID, clk.now(), clk.now(), wire.ShareAnswer{Fraction: m.Fraction})
	}
	if f := s.Fraction(clk.now(), clk.now()); f != 1 {
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
				s := New(clk.now, 2*time.Second)
				var ms []fsm.Member
				for i := range members {
					ms = append(ms, fsm.Member{ID: fmt.Sprintf("m%d", i), Fraction: 1 / float64(members)})
				}
				s.Lead(ms)
				for _, m := range ms {
					s.Renewed(m.ID, clk.now(), clk.now(), wire.ShareAnswer{Fraction: m.Fraction})
				}
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					now := clk.t + int64(i%1000)*int64(time.Microsecond)
					if mixed && i%2 == 1 {
						if f := s.Fraction(now, now+int64(2500*time.Millisecond)); f != 0 {
							b.Fatalf("F past the reach = %v", f)
						}
						continue
					}
					if f := s.Fraction(now, now+int64(500*time.Millisecond)); f != 1 {
						b.Fatalf("F inside the reach = %v, want 1", f)
					}
				}
			})
		}
	}
}

// A member added to a leader's list has no hold yet: it is overdue only
// once it stayed silent for the asked time since it was added, so the
// witness path (Overdue(self, ShareTTL)) gives it ShareTTL to answer its
// first renewal rather than fencing it at once.
func TestShares_AddedMemberOverdueOnlyAfterSilence(t *testing.T) {
	clk := &fakeClock{t: int64(10 * time.Second)}
	ttl := time.Second
	s := New(clk.now, ttl)
	s.Lead(threeMembers())
	for _, id := range []string{"a", "b", "c"} {
		s.Renewed(id, clk.now(), clk.now(), wire.ShareAnswer{Fraction: 0.25})
	}
	clk.add(100 * time.Millisecond)
	s.SetMembers(append(threeMembers(), fsm.Member{ID: "d", Fraction: 0.25}))
	clk.add(50 * time.Millisecond)
	if got := s.Overdue("a", ttl); len(got) != 0 {
		t.Fatalf("Overdue 50ms after d was added = %v, want none", got)
	}
	clk.add(ttl)
	got := s.Overdue("a", ttl)
	if len(got) != 3 || got[0] != "b" || got[2] != "d" {
		t.Fatalf("Overdue after ShareTTL of silence = %v, want b, c, d", got)
	}
}

// A member back from fallback reports how far its fallback grants reach;
// the leader counts its share from the latest answer's reach: a later,
// shorter one (its Postgres pool leave answered late) brings the count
// forward, and an answer reporting nothing left counts it from then.
func TestShares_LatestReachCounts(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, time.Second)
	s.Lead(threeMembers())
	renewAll := func(busyC time.Duration) {
		for _, id := range []string{"a", "b", "c"} {
			a := wire.ShareAnswer{Fraction: 1.0 / 3}
			if id == "c" {
				a.Busy = busyC
			}
			s.Renewed(id, clk.now(), clk.now(), a)
		}
	}
	renewAll(4 * time.Second) // c's leave of the pool did not answer: its TTL
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F with c's pool reaching 5s = %v, want 2/3", f)
	}
	clk.add(300 * time.Millisecond)
	renewAll(200 * time.Millisecond) // the leave answered: the pool's reach
	if f := s.Fraction(clk.at(1400*time.Millisecond), clk.at(1499*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F before c's new reach = %v, want 2/3", f)
	}
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F after c's new reach = %v, want 1", f)
	}
	// A longer reach later (c fell back again and the leader did not see
	// its share lapse) pushes the count back out.
	clk.add(100 * time.Millisecond)
	renewAll(time.Second)
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(2300*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F within c's longer reach = %v, want 2/3", f)
	}
	clk.add(100 * time.Millisecond)
	renewAll(0) // nothing left: counted from this answer on
	if f := s.Fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F once c reports nothing left = %v, want 1", f)
	}
}

// Rise predicts when members whose fallback grants still reach ahead (or
// whose release is recorded for later) will count, and F from then; a
// silent member has no known rise and stays out of that F.
func TestShares_RisePredictsTheFallbackReach(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := New(clk.now, time.Second)
	s.Lead(threeMembers())
	if _, _, ok := s.Rise(clk.now()); ok {
		t.Fatal("a rise known with no answer yet")
	}
	// a's fallback grants reach 2.5 s ahead (beyond its share's TTL); b
	// is held now; c is silent.
	s.Renewed("a", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3, Busy: 2500 * time.Millisecond})
	s.Renewed("b", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	if f := s.Fraction(clk.now(), clk.now()); !near(f, 1.0/3) {
		t.Fatalf("F now = %v, want 1/3 (only b held)", f)
	}
	at, F, ok := s.Rise(clk.now())
	if !ok || at != clk.at(3500*time.Millisecond) || !near(F, 2.0/3) {
		t.Fatalf("Rise = %v, %v, %v; want at 3.5 s, F 2/3 (c silent)", time.Duration(at), F, ok)
	}
	// c's release recorded for 2 s: the earlier rise, with a still out.
	s.Release("c", clk.at(2*time.Second))
	if at, F, ok := s.Rise(clk.now()); !ok || at != clk.at(2*time.Second) || !near(F, 2.0/3) {
		t.Fatalf("Rise after c's release = %v, %v, %v; want at 2 s, F 2/3 (a still out)", time.Duration(at), F, ok)
	}
}
