package slots

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// fakeNode leads a one-node "cluster": a commit applies at once, measured
// from the fake clock, as the node's fsm would.
type fakeNode struct {
	mu                 sync.Mutex
	now                int64
	caps               map[string]int
	held               map[string]Held
	ch                 chan struct{}
	commits            []fsm.Command
	unheld             []float64
	fallback           fakeFallback
	ctx                context.Context
	wg                 sync.WaitGroup
	acq, ref, rel, exp atomic.Uint64
}

type fakeFallback struct {
	active   bool
	released []string
}

func (f *fakeFallback) Active() bool { return f.active }
func (f *fakeFallback) Acquire(id string, keys []string, _ time.Duration) (raftpace.Slot, []string, error) {
	return raftpace.Slot{ID: id, Keys: keys}, nil, nil
}
func (f *fakeFallback) Release(id string)          { f.released = append(f.released, id) }
func (f *fakeFallback) InUse(int64) map[string]int { return map[string]int{"a": 1} }

type fakeState struct{ n *fakeNode }

func (s fakeState) Cap(key string) (int, bool) { c, ok := s.n.caps[key]; return c, ok }
func (s fakeState) Caps() map[string]int       { return maps.Clone(s.n.caps) }

func newFake(t *testing.T) (*fakeNode, *Slots) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeNode{caps: map[string]int{}, held: map[string]Held{}, ch: make(chan struct{}), ctx: ctx}
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	s := New(Deps{
		NodeID:     "n1",
		MaxSlotTTL: time.Minute,
		State:      fakeState{f},
		View: func() (map[string]Held, <-chan struct{}) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return maps.Clone(f.held), f.ch
		},
		Unheld:   func(int64) []float64 { return f.unheld },
		Fallback: &f.fallback,
		Now:      func() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Count:    Counters{Acquired: &f.acq, Refused: &f.ref, Released: &f.rel, Expired: &f.exp},
		Outcome:  func([]string, error) {},
		Ctx:      ctx,
		WG:       &f.wg,
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Commit: func(c fsm.Command) (uint64, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.commits = append(f.commits, c)
			switch c := c.(type) {
			case *fsm.AcquireSlots:
				f.held[c.ID] = Held{Holder: c.Holder, Keys: c.Keys, Expires: f.now + int64(c.TTL)}
			case *fsm.ReleaseSlots:
				for _, id := range c.IDs {
					delete(f.held, id)
				}
			case *fsm.SetCap:
				f.caps[c.Key] = c.Max
			case *fsm.DeleteCap:
				delete(f.caps, c.Key)
			}
			close(f.ch)
			f.ch = make(chan struct{})
			return uint64(len(f.commits)), nil
		},
		Leading:    func() bool { return true },
		Granting:   func() bool { return true },
		LeaderAddr: func() string { return "" },
		Call:       func(context.Context, string, uint8, []byte) ([]byte, error) { panic("leader calls itself") },
		LeaderErr:  func(string, uint8, string) error { return nil },
		UntilDone:  func(_ context.Context, _ string, once func() error) error { return once() },
		IndexOnLeader: func(_ context.Context, _ string, _ uint8, _ []byte, local func() (uint64, error)) (uint64, error) {
			return local()
		},
		CommitOnLeader: func(_ context.Context, _ string, _ uint8, _ []byte, local func() (uint64, error)) error {
			_, err := local()
			return err
		},
		Retryable: func(error) bool { return false },
	})
	return f, s
}

func TestSlots_CheckKeysSortsAndRefusesDuplicates(t *testing.T) {
	got, err := CheckKeys([]string{"b", "a"})
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("CheckKeys(b, a) = %v, %v", got, err)
	}
	for _, keys := range [][]string{nil, {"a", "a"}, {""}, make([]string, fsm.MaxSlotKeys+1)} {
		if _, err := CheckKeys(keys); !errors.Is(err, raftpace.ErrInvalidRequest) {
			t.Errorf("CheckKeys(%q) = %v, want ErrInvalidRequest", keys, err)
		}
	}
}

func TestSlots_CapAndUnheldFractions(t *testing.T) {
	f, s := newFake(t)
	ctx := context.Background()
	if err := s.SetCap(ctx, "a", 4); err != nil {
		t.Fatal(err)
	}
	f.unheld = []float64{0.5} // a member's half of the cap stays free
	var got []raftpace.Slot
	for range 2 {
		sl, err := s.Acquire(ctx, []string{"a"}, time.Second, 0)
		if err != nil {
			t.Fatalf("acquire within the room: %v", err)
		}
		got = append(got, sl)
	}
	var ce *raftpace.ConcurrencyLimitError
	if _, err := s.Acquire(ctx, []string{"a"}, time.Second, 0); !errors.As(err, &ce) || !slices.Equal(ce.Full, []string{"a"}) {
		t.Fatalf("acquire past the room = %v, want a *ConcurrencyLimitError on a", err)
	}
	if _, err := s.Acquire(ctx, []string{"nocap"}, time.Second, 0); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("acquire without a cap = %v, want ErrUnknownKey", err)
	}
	if err := s.Release(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, got[0]); err != nil { // twice: a no-op
		t.Fatal(err)
	}
	if in := s.InUse(); in["a"] != 1+1 { // one raft slot, one fallback slot
		t.Fatalf("InUse = %v, want a: 2", in)
	}
	if f.acq.Load() != 2 || f.ref.Load() != 1 || f.rel.Load() != 2 {
		t.Fatalf("counters acquired %d refused %d released %d", f.acq.Load(), f.ref.Load(), f.rel.Load())
	}
}

func TestSlots_ReapAndRetriedID(t *testing.T) {
	f, s := newFake(t)
	ctx := context.Background()
	if err := s.SetCap(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	req := wire.AcquireReq{ID: "x.1", Holder: "n2", Keys: []string{"a"}, TTL: time.Second}
	for range 2 { // the same ID again: granted once
		resp, err := wire.DecodeAcquireResp(s.ServeAcquire(ctx, true, req.Encode()))
		if err != nil || resp.Code != wire.CodeOK {
			t.Fatalf("ServeAcquire = %+v, %v", resp, err)
		}
	}
	if len(f.held) != 1 || len(f.commits) != 2 { // the cap and one grant
		t.Fatalf("held %v after commits %v", f.held, f.commits)
	}
	s.Reap()
	if len(f.held) != 1 {
		t.Fatal("reaped a slot before its TTL")
	}
	f.now += int64(time.Second)
	s.Reap()
	if len(f.held) != 0 || f.exp.Load() != 1 {
		t.Fatalf("held %v, expired %d after the TTL", f.held, f.exp.Load())
	}
}

func TestSlots_LocalSlotsGoToTheFallback(t *testing.T) {
	f, s := newFake(t)
	ctx := context.Background()
	f.caps["a"] = 1
	f.fallback.active = true
	sl, err := s.Acquire(ctx, []string{"a"}, time.Second, 0)
	if err != nil || len(f.commits) != 0 {
		t.Fatalf("acquire in fallback = %v, %v with commits %v", sl, err, f.commits)
	}
	if err := s.Release(ctx, sl); err != nil || !slices.Equal(f.fallback.released, []string{sl.ID}) {
		t.Fatalf("release = %v; fallback released %v, want %s", err, f.fallback.released, sl.ID)
	}
}
