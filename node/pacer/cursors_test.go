package pacer

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// A leader handing over commits each key's exact cursor: Ahead is the
// key's TAT from now (what it granted up to), and an idle key gets 1ns
// (an entry must move the horizon forward). The fsm side, that the
// successor's horizon is overwritten with it, is node's
// TestHandOver_CursorOverwritesTheHorizon.
func TestCursors_AheadIsTheTAT(t *testing.T) {
	var clock int64 = int64(10 * time.Second)
	now := func() int64 { return clock }
	lim := fsm.Limit{Rate: 10, Burst: 1}
	p := New(now, time.Second, 20*time.Millisecond,
		func(string) (int64, bool) { return clock + int64(time.Second), true },
		only("k", lim))
	p.mu.Lock()
	p.keyLocked("k").tat = clock + int64(200*time.Millisecond)
	p.mu.Unlock()
	exts := p.Cursors()
	if len(exts) != 1 || len(exts[0].Entries) != 1 || exts[0].Entries[0].Ahead != 200*time.Millisecond {
		t.Fatalf("cursors = %+v, want k at +200ms", exts)
	}
	p.mu.Lock()
	p.keyLocked("k").tat = 0
	p.mu.Unlock()
	if exts := p.Cursors(); exts[0].Entries[0].Ahead != 1 {
		t.Fatalf("idle key's cursor Ahead = %v, want 1ns", exts[0].Entries[0].Ahead)
	}
}
