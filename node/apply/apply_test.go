package apply

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace/fsm"
)

// applyRaw applies an encoded command at index through the raft.FSM
// interface, as raft would.
func applyRaw(ad *Adapter, index uint64, data []byte) error {
	if err, ok := ad.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(error); ok {
		return err
	}
	return nil
}

// fakeClock is a node clock the test moves by hand.
type fakeClock struct{ t int64 }

func (c *fakeClock) now() int64          { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t += int64(d) }

// pauseTable is a plain Pauses for tests.
type pauseTable map[string]int64

func (p pauseTable) Update(f func(m map[string]int64)) { f(p) }

func newTest(t *testing.T) (*Adapter, *fakeClock, pauseTable, func(uint64, fsm.Command)) {
	clk := &fakeClock{t: int64(10 * time.Second)}
	pauses := pauseTable{}
	ad := New(fsm.New(), clk.now, pauses)
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
	return ad, clk, pauses, apply
}

// A leader handing over commits each key's exact cursor (the pacer's
// side: TestCursors_AheadIsTheTAT in package pacer); the fsm adapter
// overwrites the horizon with it, so the successor starts at the cursor,
// not at the (later) horizon committed before.
func TestHandOver_CursorOverwritesTheHorizon(t *testing.T) {
	ad, clk, _, apply := newTest(t)
	apply(1, &fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1}})
	// The old leader committed a horizon 1s ahead, then handed over with
	// its cursor 200ms ahead.
	apply(2, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: time.Second}}})
	if h, _ := ad.Horizon("k"); h != clk.now()+int64(time.Second) {
		t.Fatalf("horizon = %v", time.Duration(h-clk.now()))
	}
	clk.add(5 * time.Millisecond) // applied a little later
	apply(3, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: 200 * time.Millisecond}}})
	h, _ := ad.Horizon("k")
	if want := clk.now() + int64(200*time.Millisecond); h != want {
		t.Fatalf("horizon after the hand-over = +%v, want +200ms from the apply", time.Duration(h-clk.now()))
	}
}

// Pauses and slots are measured from this node's apply; the callbacks
// hear of each change, and Applied's channel closes at every apply.
func TestApply_PausesSlotsAndCallbacks(t *testing.T) {
	ad, clk, pauses, apply := newTest(t)
	var limits, gates int
	ad.OnLimit = func(string) { limits++ }
	ad.OnGate = func() { gates++ }
	ch := ad.Applied()
	apply(1, &fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1}})
	select {
	case <-ch:
	default:
		t.Fatal("Applied's channel still open after an apply")
	}
	apply(2, &fsm.SetPause{Key: "k", For: time.Second})
	if got, want := pauses["k"], clk.now()+int64(time.Second); got != want {
		t.Fatalf("pause ends at %d, want %d", got, want)
	}
	held, slotsCh := ad.Slots()
	if len(held) != 0 {
		t.Fatalf("held = %v", held)
	}
	apply(3, &fsm.AcquireSlots{ID: "s1", Holder: "w1", Keys: []string{"k"}, TTL: time.Minute})
	select {
	case <-slotsCh:
	default:
		t.Fatal("Slots' channel still open after an acquire")
	}
	held, _ = ad.Slots()
	if s := held["s1"]; s.Holder != "w1" || s.Expires != clk.now()+int64(time.Minute) {
		t.Fatalf("held = %+v", held)
	}
	apply(4, &fsm.ReleaseSlots{IDs: []string{"s1"}})
	if held, _ = ad.Slots(); len(held) != 0 {
		t.Fatalf("held after release = %v", held)
	}
	apply(5, &fsm.SetPause{Key: "k", For: 0})
	if _, ok := pauses["k"]; ok {
		t.Fatal("a pause of 0 did not clear the key")
	}
	if limits != 1 || gates != 2 {
		t.Fatalf("OnLimit told %d times, OnGate %d: want 1 and 2", limits, gates)
	}
}

// A restored snapshot counts as applied now: its horizons, pauses and
// slots are measured from the restore.
func TestRestore_CountsFromNow(t *testing.T) {
	ad, _, _, apply := newTest(t)
	apply(1, &fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1}})
	apply(2, &fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "k", Ahead: time.Second}}})
	apply(3, &fsm.SetPause{Key: "k", For: time.Second})
	snap, err := ad.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}

	clk2 := &fakeClock{t: int64(time.Hour)}
	pauses := pauseTable{}
	other := New(fsm.New(), clk2.now, pauses)
	var resets, members int
	other.OnReset = func() { resets++ }
	other.OnMembers = func() { members++ }
	if err := other.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if h, ok := other.Horizon("k"); !ok || h != clk2.now()+int64(time.Second) {
		t.Fatalf("restored horizon = %d, %v; want now+1s", h, ok)
	}
	if got := pauses["k"]; got != clk2.now()+int64(time.Second) {
		t.Fatalf("restored pause ends at %d, want now+1s", got)
	}
	if resets != 1 || members != 1 {
		t.Fatalf("OnReset told %d times, OnMembers %d: want 1 each", resets, members)
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }
