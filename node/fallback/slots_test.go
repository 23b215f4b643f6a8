package fallback

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// Fallback slots: only from MaxSlotTTL into fallback, floor(f*cap) of
// them, ending by the time fallback stops; reported in the renewal's Busy.
func TestFallbackSlots(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.renewAt(0)
	if _, _, err := h.fb.AcquireSlots("s0", []string{"c"}, time.Second); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("acquire in raft mode: %v, want ErrNotLeader", err)
	}
	h.wantMode(shareTTL, ModeLocal)
	h.at(shareTTL + slotTTL - 1)
	_, retry, err := h.fb.AcquireSlots("s1", []string{"c"}, time.Second)
	if !errors.Is(err, raftpace.ErrConcurrencyLimit) || !slices.Equal(retry, []string{"c"}) {
		t.Fatalf("acquire before MaxSlotTTL into fallback: %v %v, want ErrConcurrencyLimit on c", retry, err)
	}
	now := h.at(shareTTL + slotTTL)
	// f = 0.25 of a cap of 8: two slots.
	for _, id := range []string{"s1", "s2"} {
		s, _, err := h.fb.AcquireSlots(id, []string{"c"}, time.Second)
		if err != nil {
			t.Fatalf("slot %s: %v", id, err)
		}
		if !s.Deadline.Equal(epoch.Add(time.Duration(now) + time.Second)) {
			t.Fatalf("slot %s deadline %v, want now + its TTL", id, s.Deadline)
		}
	}
	_, full, err := h.fb.AcquireSlots("s3", []string{"c"}, time.Second)
	if !errors.Is(err, raftpace.ErrConcurrencyLimit) || !slices.Equal(full, []string{"c"}) {
		t.Fatalf("third slot with room for two: %v %v", full, err)
	}
	if _, _, err := h.fb.AcquireSlots("s4", []string{"nocap"}, time.Second); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("a key with no cap: %v, want ErrUnknownKey", err)
	}
	if got := h.fb.LocalSlotsInUse(now); got["c"] != 2 {
		t.Fatalf("in use %v, want c: 2", got)
	}
	h.fb.ReleaseSlot("s1")
	// A slot ends by the time fallback stops (promise + FallbackFor).
	s, _, err := h.fb.AcquireSlots("s5", []string{"c"}, time.Hour)
	if err != nil || !s.Deadline.Equal(epoch.Add(time.Duration(t0)+shareTTL+fbFor)) {
		t.Fatalf("slot asking an hour: %v %v, want it to end when fallback stops", s, err)
	}
	// Expired slots make room and are not counted.
	if got := h.fb.LocalSlotsInUse(now + int64(time.Second)); got["c"] != 1 {
		t.Fatalf("in use a second later %v, want c: 1 (s5)", got)
	}
	// The renewal reports the slots' reach: the leader keeps the floor
	// free until then, released or not.
	at := shareTTL + slotTTL + time.Millisecond
	if a := h.renewAt(at); a.Busy != shareTTL+fbFor-at {
		t.Fatalf("answer with fallback slots held: busy %v, want %v", a.Busy, shareTTL+fbFor-at)
	}
	if _, _, err := h.fb.AcquireSlots("s6", []string{"c"}, time.Second); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("acquire after the renewal: %v, want ErrNotLeader", err)
	}
	h.wantMode(at+shareTTL+fbFor, ModeStopped)
	if _, _, err := h.fb.AcquireSlots("s7", []string{"c"}, time.Second); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("acquire when stopped: %v, want ErrStopped", err)
	}
}

// With the witness a fallback slot ends by the licence.
func TestFallbackSlotsWitnessed(t *testing.T) {
	fp := &fakePool{joinErr: errors.New("down")}
	h := newHarness(t, witnessed(), fp.pool())
	h.lapsed()
	h.fb.tendPool(context.Background())
	sent := h.at(shareTTL + slotTTL)
	h.fb.heard(sent, false)
	s, _, err := h.fb.AcquireSlots("s1", []string{"c"}, time.Hour)
	if err != nil || !s.Deadline.Equal(epoch.Add(time.Duration(sent)+witTTL)) {
		t.Fatalf("slot asking an hour: %v %v, want it to end with the licence", s, err)
	}
}

// The loops: Watch joins the pool on its tick; HeartbeatLoop licenses at
// once. (Real timers, so this takes about a tick: 100ms.)
func TestLoops(t *testing.T) {
	fp := &fakePool{reachable: true}
	h := newHarness(t, witnessed(), fp.pool())
	h.lapsed()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { h.fb.HeartbeatLoop(ctx); done <- struct{}{} }()
	go func() { h.fb.Watch(ctx); done <- struct{}{} }()
	deadline := time.Now().Add(5 * time.Second)
	for h.fb.Current() != ModePooled || h.fb.licence.Load() != h.clock.Load()+int64(witTTL) {
		if time.Now().After(deadline) {
			t.Fatalf("mode %s, licence %d: Watch did not join the pool or HeartbeatLoop did not license", h.fb.Current(), h.fb.licence.Load())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	<-done
}
