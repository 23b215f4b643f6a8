package fallback

import (
	"errors"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
)

// The answer a renewal returns: the applied index, the committed fraction,
// how far the fallback's grants still reach (Busy), and the flags.
func TestShareAnswer(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	a := h.renewAt(0)
	if a.Applied != 42 || a.Fraction != 0.25 || a.Busy != 0 || a.Fenced || a.Departing {
		t.Fatalf("answer in raft mode: %+v, want applied 42, fraction 0.25, nothing else", a)
	}
	h.setFraction(0.5)
	h.state.mu.Lock()
	h.state.applied = 43
	h.state.mu.Unlock()
	if a := h.renewAt(100 * time.Millisecond); a.Fraction != 0.5 || a.Applied != 43 {
		t.Fatalf("answer after a change: %+v, want the committed fraction 0.5 at applied 43", a)
	}
	// The promise ran out: fallback granted a slot at t0+1.1s+80ms; the
	// answer at t0+1.2s reports its end plus UseGrace.
	lapse := 100*time.Millisecond + shareTTL
	h.wantMode(lapse, ModeLocal)
	h.setFraction(0.25)
	for range 5 { // the burst, at the lapse
		if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // +40ms, +80ms
		if _, err := h.fb.ReserveAll(one("k", 1), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	a = h.renewAt(lapse + 100*time.Millisecond)
	if want := 80*time.Millisecond + useGrace - 100*time.Millisecond; a.Busy != want {
		t.Fatalf("answer back from local: busy %v, want %v (last slot + UseGrace - now)", a.Busy, want)
	}
	// Back in raft mode, each answer reports what is left of that reach
	// (the leader counts the share from the latest), then nothing.
	if want := 80*time.Millisecond + useGrace - 150*time.Millisecond; h.renewAt(lapse+150*time.Millisecond).Busy != want {
		t.Fatalf("next answer in raft mode: busy %v, want the rest of the reach %v", h.fb.Renew().Busy, want)
	}
	done := lapse + 80*time.Millisecond + useGrace
	if a := h.renewAt(done); a.Busy != 0 {
		t.Fatalf("answer once the last fallback slot is past its use-by: busy %v, want 0", a.Busy)
	}
	// A lapse with slots long used: busy 0.
	h.wantMode(done+shareTTL, ModeLocal)
	if a := h.renewAt(done + 2*shareTTL); a.Busy != 0 {
		t.Fatalf("answer with every fallback slot past its use-by: busy %v, want 0", a.Busy)
	}
}

// A renewal that arrives after the promise ran out, before anything
// noticed (the mode still raft), still reports the fallback's reach: the
// node was entitled to grant from its fraction.
func TestShareAnswerAtLapseWithoutTransition(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	for range 40 { // the burst, then one every 40ms: the last at +1.4s
		if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if a := h.renewAt(shareTTL + time.Millisecond); a.Busy != 1400*time.Millisecond+useGrace-time.Millisecond {
		t.Fatalf("answer back from local: busy %v", a.Busy)
	}
	h.at(2*shareTTL + time.Millisecond) // the promise ran out; mode still raft
	if a := h.fb.Renew(); a.Busy != 1400*time.Millisecond+useGrace-shareTTL-time.Millisecond {
		t.Fatalf("answer after an unnoticed lapse: busy %v, want the last slot + UseGrace - now", a.Busy)
	}
}

// Fenced reports what the witness said of this member.
func TestShareAnswerFenced(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.fb.heard(t0, false)
	if h.fb.licence.Load() != t0+int64(witTTL) {
		t.Fatalf("licence %d, want sent + WitnessTTL", h.fb.licence.Load())
	}
	h.fb.heard(t0-int64(time.Second), false) // an older heartbeat answered late
	if h.fb.licence.Load() != t0+int64(witTTL) {
		t.Fatal("a late answer to an older heartbeat shortened the licence")
	}
	h.fb.heard(t0+int64(time.Second), true)
	if !h.renewAt(0).Fenced {
		t.Fatal("answer after the witness reported a fence: Fenced false")
	}
	if h.fb.licence.Load() != 0 {
		t.Fatal("a fence left the licence in place")
	}
	h.wantLog("a leader fenced this member in postgres")
	h.fb.heard(t0+int64(2*time.Second), true)
	if n := h.countLog("a leader fenced this member"); n != 1 {
		t.Fatalf("fence logged %d times, want once", n)
	}
	h.fb.heard(t0+int64(3*time.Second), false)
	if h.renewAt(0).Fenced {
		t.Fatal("answer after the fence was lifted: Fenced true")
	}
	h.wantLog("the fence on this member in postgres was lifted")
}

// Depart stops the node for good, answers Departing, and reports how far
// its fallback grants reach; Undepart undoes it.
func TestDepartInRaftMode(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.renewAt(0)
	h.at(100 * time.Millisecond)
	if busy := h.fb.Depart(); busy != 0 {
		t.Fatalf("depart in raft mode: busy %v, want 0", busy)
	}
	h.wantLog("leaving the cluster: this node spends no fallback fraction any more")
	h.wantMode(200*time.Millisecond, ModeStopped)
	a := h.renewAt(300 * time.Millisecond)
	if !a.Departing || a.Busy != 0 {
		t.Fatalf("answer while departing: %+v, want Departing", a)
	}
	if m := h.fb.Current(); m != ModeStopped {
		t.Fatalf("a renewal while departing moved the node to %s", m)
	}
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("reserve while departing: %v, want ErrStopped", err)
	}
	// Within the renewal's promise, undepart goes back to raft.
	h.at(400 * time.Millisecond)
	h.fb.Undepart()
	h.wantMode(400*time.Millisecond, ModeRaft)
	if a := h.renewAt(500 * time.Millisecond); a.Departing {
		t.Fatal("answer after undepart: Departing")
	}
}

func TestDepartFromLocal(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	for range 7 { // the burst of 5, then +40ms and +80ms
		if _, err := h.fb.ReserveAll(one("k", 1), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	h.at(shareTTL + 10*time.Millisecond)
	if busy, want := h.fb.Depart(), 80*time.Millisecond+useGrace-10*time.Millisecond; busy != want {
		t.Fatalf("depart from local: busy %v, want %v", busy, want)
	}
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("reserve after depart: %v, want ErrStopped", err)
	}
	// The promise ran out meanwhile: undepart goes straight to fallback.
	h.at(shareTTL + 20*time.Millisecond)
	h.fb.Undepart()
	if m := h.fb.Current(); m != ModeLocal {
		t.Fatalf("undepart with the promise run out: %s, want local", m)
	}
}
