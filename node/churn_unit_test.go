package node

import (
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// applyRaw applies an encoded command at index through the raft.FSM
// interface, as raft would.
func applyRaw(ad *fsmAdapter, index uint64, data []byte) error {
	if err, ok := ad.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(error); ok {
		return err
	}
	return nil
}

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
	s := newShares(clk.now, ttl)
	s.lead(threeMembers())
	// a and b answer at q = 1s: held for slots in [1s, 3s); c is silent.
	for _, id := range []string{"a", "b"} {
		s.renewed(id, clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	}
	if f := s.fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F with c silent = %v, want 2/3", f)
	}
	// c is fenced: its fraction counts from 2s on.
	s.release("c", clk.at(2*time.Second))
	if f := s.fraction(clk.at(1500*time.Millisecond), clk.at(1600*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F before the release time = %v, want 2/3", f)
	}
	if f := s.fraction(clk.at(1900*time.Millisecond), clk.at(2100*time.Millisecond)); !near(f, 2.0/3) {
		t.Fatalf("F for slots straddling the release time = %v, want 2/3", f)
	}
	if f := s.fraction(clk.at(2*time.Second), clk.at(2500*time.Millisecond)); !near(f, 1) {
		t.Fatalf("F after the release time = %v, want 1", f)
	}
	// An earlier release wins; a later one does not postpone it.
	s.release("c", clk.at(5*time.Second))
	if f := s.fraction(clk.at(2*time.Second), clk.at(2500*time.Millisecond)); !near(f, 1) {
		t.Fatalf("a later release postponed the first: F = %v", f)
	}
	if got := s.released(clk.at(1999 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("released before its time: %v", got)
	}
	if got := s.released(clk.at(2 * time.Second)); len(got) != 1 || got[0] != "c" {
		t.Fatalf("released at its time = %v, want [c]", got)
	}
	// c answers again (it was alive): held by the normal rule, not
	// released: counted only until q + TTL.
	clk.add(2 * time.Second) // now 3s
	s.renewed("c", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	if s.isReleased("c") {
		t.Fatal("a renewal answer did not clear the release")
	}
	// a and b lapsed at 3s (renewed at 1s with TTL 2s); c is held from 3s.
	if f := s.fraction(clk.at(3*time.Second), clk.at(3500*time.Millisecond)); !near(f, 1.0/3) {
		t.Fatalf("F after c's renewal = %v, want 1/3", f)
	}
	if f := s.fraction(clk.at(5*time.Second), clk.at(5500*time.Millisecond)); !near(f, 0) {
		t.Fatalf("F past every share = %v, want 0", f)
	}
}

// A leaving member's answer to a renewal that crossed its leave request
// keeps the release: the leader counts its fraction and forgets it. (The
// rolling-replace churn tests lost a leaving leader's fraction this way:
// the successor's first renewal round reached it after the leave.)
func TestShares_DepartingAnswerKeepsTheRelease(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := newShares(clk.now, time.Second)
	s.lead(threeMembers())
	q := clk.now()
	s.release("c", clk.now())
	clk.add(10 * time.Millisecond)
	s.renewed("c", q, clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3, Departing: true})
	if !s.isReleased("c") {
		t.Fatal("a departing member's renewal answer undid its release")
	}
	if got := s.released(clk.now()); len(got) != 1 || got[0] != "c" {
		t.Fatalf("released = %v, want [c]", got)
	}
	// A new incarnation joining gossip under the same id ends the release
	// too: reclaim must not remove it from raft again.
	s.release("b", clk.now())
	s.rejoined("b")
	if s.isReleased("b") {
		t.Fatal("a rejoined member is still released")
	}
	// The same answer from a member that is not leaving clears it (it was
	// fenced or reaped and is alive).
	s.renewed("c", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	if s.isReleased("c") {
		t.Fatal("a staying member's renewal answer did not clear its release")
	}
}

// overdue lists silent members whose share lapsed, never released ones,
// never the leader itself.
func TestShares_OverdueSkipsReleasedAndSelf(t *testing.T) {
	clk := &fakeClock{t: int64(time.Second)}
	s := newShares(clk.now, time.Second)
	s.lead(threeMembers())
	s.renewed("a", clk.now(), clk.now(), wire.ShareAnswer{Fraction: 1.0 / 3})
	clk.add(500 * time.Millisecond)
	if got := s.overdue("a", 0); len(got) != 2 {
		t.Fatalf("overdue = %v, want b and c (never answered)", got)
	}
	s.release("b", clk.now())
	if got := s.overdue("a", 0); len(got) != 1 || got[0] != "c" {
		t.Fatalf("overdue = %v, want [c]", got)
	}
	if got := s.overdue("a", time.Second); len(got) != 0 {
		t.Fatalf("overdue after 1s = %v, want none yet", got)
	}
	clk.add(time.Second)
	if silent, lapsed := s.silence("c"); !lapsed || silent != 1500*time.Millisecond {
		t.Fatalf("silence(c) = %v, %v; want 1.5s, lapsed", silent, lapsed)
	}
}

// A leader handing over commits each key's exact cursor; the fsm adapter
// overwrites the horizon with it, so the successor starts at the cursor,
// not at the (later) horizon committed before.
func TestHandOver_SuccessorStartsAtTheCursor(t *testing.T) {
	clk := &fakeClock{t: int64(10 * time.Second)}
	st := fsm.New()
	ad := newFSMAdapter(st, clk.now)
	p := newPacer(clk.now, time.Second, 20*time.Millisecond, ad.horizon, st.Limits)
	p.tracked = ad.horizon
	apply := func(index uint64, c fsm.Command) {
		t.Helper()
		data, err := fsm.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := applyRaw(ad, index, data); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, &fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1}})
	p.setLimit("k", fsm.Limit{Rate: 10, Burst: 1}, true)
	// The old leader committed a horizon 1s ahead and granted up to 200ms.
	apply(2, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: time.Second}}})
	p.mu.Lock()
	p.keyLocked("k").tat = clk.now() + int64(200*time.Millisecond)
	p.mu.Unlock()
	if h, _ := ad.horizon("k"); h != clk.now()+int64(time.Second) {
		t.Fatalf("horizon = %v", time.Duration(h-clk.now()))
	}
	exts := p.cursors()
	if len(exts) != 1 || len(exts[0].Entries) != 1 || exts[0].Entries[0].Ahead != 200*time.Millisecond {
		t.Fatalf("cursors = %+v, want k at +200ms", exts)
	}
	clk.add(5 * time.Millisecond) // applied a little later
	apply(3, &exts[0])
	h, _ := ad.horizon("k")
	if want := clk.now() + int64(200*time.Millisecond); h != want {
		t.Fatalf("horizon after the hand-over = +%v, want +200ms from the apply", time.Duration(h-clk.now()))
	}
	// Idle keys get Ahead >= 1ns (an entry must move the horizon forward).
	p.mu.Lock()
	p.keyLocked("k").tat = 0
	p.mu.Unlock()
	if exts := p.cursors(); exts[0].Entries[0].Ahead != 1 {
		t.Fatalf("idle key's cursor Ahead = %v, want 1ns", exts[0].Entries[0].Ahead)
	}
}
