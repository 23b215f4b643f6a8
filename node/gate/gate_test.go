package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// fakeLeader is a one-node "cluster" that leads: a commit applies at once,
// measured from the fake clock, as the node's fsm would.
type fakeLeader struct {
	mu      sync.Mutex
	now     int64
	applied Deadlines
	commits []fsm.SetPause
	pauses  atomic.Uint64
	mutex   sync.Mutex
}

func (f *fakeLeader) clock() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeLeader) advance(d time.Duration) { f.mu.Lock(); f.now += int64(d); f.mu.Unlock() }

func (f *fakeLeader) gate() *Gate {
	return New(Deps{
		Applied: &f.applied,
		Mu:      &f.mutex,
		Now:     f.clock,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pauses:  &f.pauses,
		Commit: func(c fsm.Command) (uint64, error) {
			p := *c.(*fsm.SetPause)
			f.commits = append(f.commits, p)
			now := f.clock()
			f.applied.Update(func(m map[string]int64) {
				if p.For == 0 {
					delete(m, p.Key)
				} else {
					m[p.Key] = now + int64(p.For)
				}
			})
			return uint64(len(f.commits)), nil
		},
		Leading:     func() bool { return true },
		CallLeader:  func(context.Context, string, uint8, []byte) ([]byte, error) { panic("leader calls itself") },
		LeaderErr:   func(string, uint8, string) error { return nil },
		UntilDone:   func(_ context.Context, _ string, once func() error) error { return once() },
		WaitApplied: func(context.Context, uint64) error { return nil },
		Sleep:       func(context.Context, time.Duration) error { return errors.New("no sleeping in this test") },
	})
}

func TestPause_AtomicMaximumOnTheLeader(t *testing.T) {
	f := &fakeLeader{}
	g := f.gate()
	ctx := context.Background()
	if rem, err := g.Pause(ctx, "k", 10*time.Second); err != nil || rem != 10*time.Second {
		t.Fatalf("Pause(10s) = %v, %v", rem, err)
	}
	f.advance(time.Second)
	// A shorter hint later: the pause in force stays, nothing is committed.
	if rem, err := g.Pause(ctx, "k", 3*time.Second); err != nil || rem != 9*time.Second {
		t.Fatalf("Pause(3s) a second later = %v, %v; want 9s in force", rem, err)
	}
	if len(f.commits) != 1 || f.pauses.Load() != 1 {
		t.Fatalf("commits %v, counted %d; want the first only", f.commits, f.pauses.Load())
	}
	// A longer one reaches further: committed.
	if rem, err := g.Pause(ctx, "k", 20*time.Second); err != nil || rem != 20*time.Second || len(f.commits) != 2 {
		t.Fatalf("Pause(20s) = %v, %v with commits %v", rem, err, f.commits)
	}
	if p := g.PausedFor("k"); p != 20*time.Second {
		t.Fatalf("PausedFor = %v, want 20s", p)
	}
	if p := g.PausedFor("other"); p != 0 {
		t.Fatalf("PausedFor(other) = %v, want 0", p)
	}
}

func TestPause_ClearExpiredAndWait(t *testing.T) {
	f := &fakeLeader{}
	g := f.gate()
	ctx := context.Background()
	if _, err := g.Pause(ctx, "k", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	var pe *raftpace.PausedError
	if err := g.Wait(ctx, "k", time.Second); !errors.As(err, &pe) || pe.Remaining != 2*time.Second {
		t.Fatalf("Wait with 1s max = %v, want a *PausedError of 2s", err)
	}
	g.ClearExpired()
	if len(f.commits) != 1 {
		t.Fatalf("cleared a pause still in force: %v", f.commits)
	}
	f.advance(2 * time.Second)
	g.ClearExpired()
	if len(f.commits) != 2 || f.commits[1] != (fsm.SetPause{Key: "k", For: 0}) {
		t.Fatalf("commits %v, want the pause cleared", f.commits)
	}
	if err := g.Wait(ctx, "k", 0); err != nil {
		t.Fatalf("Wait after the pause = %v", err)
	}
	if len(g.Pauses()) != 0 {
		t.Fatalf("Pauses = %v, want none", g.Pauses())
	}
}

func TestPause_LeaderPausedHoldsThisNode(t *testing.T) {
	f := &fakeLeader{}
	g := f.gate()
	err := g.LeaderPaused("k", 5*time.Second)
	if !errors.Is(err, ErrLeaderPaused) {
		t.Fatalf("LeaderPaused = %v", err)
	}
	if p := g.PausedFor("k"); p != 5*time.Second {
		t.Fatalf("PausedFor = %v, want 5s recorded here", p)
	}
	if len(f.commits) != 0 {
		t.Fatalf("a reported pause was committed: %v", f.commits)
	}
}

func TestPause_ServeRefusesBadRequestsAndFollowers(t *testing.T) {
	g := (&fakeLeader{}).gate()
	resp, err := wire.DecodePauseResp(g.Serve(true, wire.PauseReq{Key: "k", For: fsm.MaxPause + 1}.Encode()))
	if err != nil || resp.Code != wire.CodeInvalid {
		t.Fatalf("too long a pause: %+v, %v", resp, err)
	}
	resp, err = wire.DecodePauseResp(g.Serve(false, wire.PauseReq{Key: "k", For: time.Second}.Encode()))
	if err != nil || resp.Code != wire.CodeNotLeader {
		t.Fatalf("on a follower: %+v, %v", resp, err)
	}
	resp, err = wire.DecodePauseResp(g.Serve(true, wire.PauseReq{Key: "k", For: time.Second}.Encode()))
	if err != nil || resp.Code != wire.CodeOK || resp.Remaining != time.Second || resp.Index != 1 {
		t.Fatalf("on the leader: %+v, %v", resp, err)
	}
}

func TestPause_DeadlinesExtendKeepsTheLaterAndForgetsThePast(t *testing.T) {
	var d Deadlines
	if _, ok := d.Get("a"); ok {
		t.Fatal("empty Deadlines has a deadline")
	}
	d.Extend("a", 100, 0)
	d.Extend("a", 50, 0)
	d.Extend("b", 10, 0)
	if end, _ := d.Get("a"); end != 100 {
		t.Fatalf("a = %d, want the later 100", end)
	}
	d.Extend("c", 300, 20) // b ended at 10
	if _, ok := d.Get("b"); ok || len(d.All()) != 2 {
		t.Fatalf("All = %v, want b forgotten", d.All())
	}
	d.Update(func(m map[string]int64) { clear(m) })
	if d.m.Load() != nil {
		t.Fatal("an empty map is stored, not nil")
	}
}
