package fallback

import (
	"errors"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

func TestModeStrings(t *testing.T) {
	for m, want := range map[Mode]string{ModeRaft: "raft", ModeLocal: "local", ModeStopped: "stopped", ModePooled: "pooled", Mode(9): "mode(9)"} {
		if m.String() != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int32(m), m.String(), want)
		}
	}
}

// A starting node keeps the promise it may have made before a crash: no
// fallback before ShareTTL since its start, even with no renewal at all;
// and it spends no fraction until a leader renewed it once.
func TestStartingNodeKeepsPromiseFromStart(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.wantMode(0, ModeRaft)
	h.wantMode(shareTTL-1, ModeRaft)
	if _, err := h.fb.ReserveAll(one("k", 1), time.Second); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("reserve in raft mode: %v, want ErrNotLeader", err)
	}
	h.wantMode(shareTTL, ModeLocal)
	h.wantLog("pacing locally at its fallback fraction")
	h.wantLog("fraction=0 ")
	// Never renewed since start: the stored fraction may be one it handed
	// back, so it admits nothing of its own.
	if _, err := h.fb.ReserveAll(one("k", 1), time.Second); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("reserve before any renewal: %v, want ErrNotLeader", err)
	}
}

// raft -> local exactly ShareTTL after the last renewal, not before.
func TestLapseShareTTLAfterLastRenewal(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.renewAt(300 * time.Millisecond)
	h.renewAt(700 * time.Millisecond)
	h.wantMode(700*time.Millisecond+shareTTL-1, ModeRaft)
	if n := h.countLog("pacing locally"); n != 0 {
		t.Fatalf("announced local pacing %d times while the promise held", n)
	}
	h.wantMode(700*time.Millisecond+shareTTL, ModeLocal)
	h.wantLog("from=raft")
	h.wantLog("fraction=0.25")
	// The transition is announced once.
	h.wantMode(700*time.Millisecond+shareTTL+time.Millisecond, ModeLocal)
	if n := h.countLog("pacing locally"); n != 1 {
		t.Fatalf("announced local pacing %d times, want 1", n)
	}
}

// local -> stopped FallbackFor after the promise ran out.
func TestLocalStopsAfterFallbackFor(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed() // promise: t0 + ShareTTL
	h.wantMode(shareTTL+fbFor-1, ModeLocal)
	if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
		t.Fatalf("reserve just before the budget ends: %v", err)
	}
	h.wantMode(shareTTL+fbFor, ModeStopped)
	h.wantLog("fallback budget exhausted")
	h.wantLog("from=local")
	if _, err := h.fb.ReserveAll(one("k", 1), time.Second); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("reserve when stopped: %v, want ErrStopped", err)
	}
	// Stopped stays stopped without a renewal.
	h.wantMode(time.Hour, ModeStopped)
}

// local -> raft and stopped -> raft on a renewal, at once.
func TestRenewalReturnsToRaft(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	h.renewAt(shareTTL + time.Millisecond)
	if m := h.fb.Current(); m != ModeRaft {
		t.Fatalf("after a renewal in local mode: %s, want raft", m)
	}
	h.wantLog("share renewed by the leader: admitting through raft")
	if _, err := h.fb.ReserveAll(one("k", 1), time.Second); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("reserve after the renewal: %v, want ErrNotLeader (go through the leader)", err)
	}
	// The renewal made a new promise: ShareTTL from it.
	renewed := shareTTL + time.Millisecond
	h.wantMode(renewed+shareTTL-1, ModeRaft)
	h.wantMode(renewed+shareTTL, ModeLocal)
	h.wantMode(renewed+shareTTL+fbFor, ModeStopped)
	h.renewAt(renewed + shareTTL + fbFor + time.Second)
	if m := h.fb.Current(); m != ModeRaft {
		t.Fatalf("after a renewal in stopped mode: %s, want raft", m)
	}
	if n := h.countLog("share renewed by the leader"); n != 2 {
		t.Fatalf("announced raft %d times, want 2 (local -> raft, stopped -> raft)", n)
	}
	// A renewal while in raft mode announces nothing.
	h.renewAt(renewed + shareTTL + fbFor + 1500*time.Millisecond)
	if n := h.countLog("share renewed by the leader"); n != 2 {
		t.Fatalf("announced raft %d times after a renewal in raft mode, want 2", n)
	}
}

// Local pacing: the fraction of the rate, floor(f*burst) of the burst.
// f = 0.25 of 100/s, burst 20: 25/s (40ms apart), a burst of 5.
func TestLocalBudget(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	now := h.at(shareTTL)
	for i := range 5 {
		r, err := h.fb.ReserveAll(one("k", 1), 0)
		if err != nil {
			t.Fatalf("reservation %d of the burst: %v", i+1, err)
		}
		if want := epoch.Add(time.Duration(now)); !r.At.Equal(want) || !r.UseBy.Equal(want.Add(useGrace)) {
			t.Fatalf("reservation %d: at %v use by %v, want %v and +UseGrace", i+1, r.At, r.UseBy, want)
		}
	}
	_, err := h.fb.ReserveAll(one("k", 1), 39*time.Millisecond)
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || le.Wait != 40*time.Millisecond || le.Key != "k" || le.MaxWait != 39*time.Millisecond {
		t.Fatalf("sixth reservation within 39ms: %v, want LimitExceededError waiting 40ms", err)
	}
	r, err := h.fb.ReserveAll(one("k", 1), 40*time.Millisecond)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(now)+40*time.Millisecond)) {
		t.Fatalf("sixth reservation within 40ms: %v %v, want at +40ms", r, err)
	}
	r, err = h.fb.ReserveAll(one("k", 2), time.Second)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(now)+120*time.Millisecond)) {
		t.Fatalf("two more: %v %v, want at +120ms", r, err)
	}
	// More than the fraction's burst can never conform.
	if _, err := h.fb.ReserveAll(one("k", 6), time.Hour); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Fatalf("6 events with a local burst of 5: %v, want ErrInvalidRequest", err)
	}
	// Other keys have buckets of their own; a key with no limit applied
	// is never admitted in fallback.
	if _, err := h.fb.ReserveAll(one("c", 1), 0); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if _, err := h.fb.ReserveAll(one("nope", 1), time.Hour); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("unknown key: %v, want ErrNotLeader", err)
	}
}

// A small fraction still has a burst of one; the interval scales by 1/f.
// At 1 s per event the interval is longer than ShareTTL/3, so the key
// starts its overrun (wire.ShareOverrun: 1s - 333ms) after the lapse: a
// leader's last grant may claim its rate until then.
func TestLocalBudgetSmallFraction(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.setFraction(0.01) // 1/s of 100/s, burst floor(0.2) -> 1
	h.lapsed()
	now := h.at(shareTTL)
	overrun := time.Second - shareTTL/3
	var le *raftpace.LimitExceededError
	if _, err := h.fb.ReserveAll(one("k", 1), 0); !errors.As(err, &le) || le.Wait != overrun {
		t.Fatalf("first event at f=0.01 at once: %v, want LimitExceededError waiting %v", err, overrun)
	}
	r, err := h.fb.ReserveAll(one("k", 1), time.Hour)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(now)+overrun)) {
		t.Fatalf("first event at f=0.01: %v %v, want %v after the lapse", r, err, overrun)
	}
	r, err = h.fb.ReserveAll(one("k", 1), time.Hour)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(now)+overrun+time.Second)) {
		t.Fatalf("second event at f=0.01: %v %v, want 1s later", r, err)
	}
	if _, err := h.fb.ReserveAll(one("k", 2), time.Hour); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Fatalf("2 events with a local burst of 1: %v, want ErrInvalidRequest", err)
	}
}

// A member with no fraction of its own (new) leaves its callers to the
// leader.
func TestLocalNoFraction(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.setFraction(0)
	h.lapsed()
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("reserve with no fraction: %v, want ErrNotLeader", err)
	}
}

// Unsafe.FallbackFullRate paces at the key's full rate and burst, even
// before any renewal.
func TestLocalFullRate(t *testing.T) {
	cfg := defaultConfig()
	cfg.FullRate = true
	h := newHarness(t, cfg, nil)
	h.wantMode(shareTTL, ModeLocal)
	for i := range 20 {
		if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
			t.Fatalf("reservation %d of the full burst: %v", i+1, err)
		}
	}
	if _, err := h.fb.ReserveAll(one("k", 1), 0); err == nil {
		t.Fatal("21st reservation at once admitted")
	}
}

// Each fallback starts its keys afresh: nothing carries over from the
// previous one.
func TestFallbackStartsAfresh(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	for range 5 {
		if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 { // the bucket reaches 2s ahead: past the next fallback's start
		if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	h.renewAt(shareTTL + time.Millisecond)
	h.wantMode(2*shareTTL+time.Millisecond, ModeLocal)
	for i := range 5 {
		if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
			t.Fatalf("reservation %d of the new fallback's burst: %v", i+1, err)
		}
	}
}

// Local pacing of several keys: one instant for all, or none consumed.
// At the fraction 0.25, "k" (100/s, burst 20) paces locally at 25/s with a
// burst of 5 and "c" (20/s, burst 1) at 5/s, one at a time.
func TestLocalReserveAllOneInstantOrNone(t *testing.T) {
	h := newHarness(t, defaultConfig(), nil)
	h.lapsed()
	now := h.clock.Load()
	if _, err := h.fb.ReserveAll(one("c", 1), 0); err != nil {
		t.Fatal(err)
	}
	both := []raftpace.Want{{Key: "k", Count: 1}, {Key: "c", Count: 1}}
	_, err := h.fb.ReserveAll(both, 100*time.Millisecond)
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || le.Key != "c" || le.Wait != 200*time.Millisecond {
		t.Fatalf("with c's next slot 200 ms away: %v; want a LimitExceededError naming c", err)
	}
	// Nothing of k was taken: its whole local burst of 5 is there at once.
	if r, err := h.fb.ReserveAll(one("k", 5), 0); err != nil || r.At != epoch.Add(time.Duration(now)) {
		t.Fatalf("k's burst after the refusal: %v, %v", r, err)
	}
	r, err := h.fb.ReserveAll(both, time.Second)
	if err != nil || r.At != epoch.Add(time.Duration(now)+200*time.Millisecond) {
		t.Fatalf("both with time to wait: %v, %v; want both at c's next slot, +200ms", r, err)
	}
	// k's slot was taken as arriving at the instant: its TAT went from
	// +200 ms (the burst) to +240 ms, so its next slot is at 240 ms less
	// its tolerance (4 x 40 ms): +80 ms, not the +40 ms it had before.
	if r, err := h.fb.ReserveAll(one("k", 1), time.Second); err != nil || r.At != epoch.Add(time.Duration(now)+80*time.Millisecond) {
		t.Fatalf("k after the instant: %v, %v; want +80ms", r, err)
	}
}
