package node

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
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

// A leader handing over commits each key's exact cursor (the pacer's
// side: TestCursors_AheadIsTheTAT in package pacer); the fsm adapter
// overwrites the horizon with it, so the successor starts at the cursor,
// not at the (later) horizon committed before.
func TestHandOver_CursorOverwritesTheHorizon(t *testing.T) {
	clk := &fakeClock{t: int64(10 * time.Second)}
	st := fsm.New()
	ad := newFSMAdapter(st, clk.now)
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
	// The old leader committed a horizon 1s ahead, then handed over with
	// its cursor 200ms ahead.
	apply(2, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: time.Second}}})
	if h, _ := ad.horizon("k"); h != clk.now()+int64(time.Second) {
		t.Fatalf("horizon = %v", time.Duration(h-clk.now()))
	}
	clk.add(5 * time.Millisecond) // applied a little later
	apply(3, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: 200 * time.Millisecond}}})
	h, _ := ad.horizon("k")
	if want := clk.now() + int64(200*time.Millisecond); h != want {
		t.Fatalf("horizon after the hand-over = +%v, want +200ms from the apply", time.Duration(h-clk.now()))
	}
}
