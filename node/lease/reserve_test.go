package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// fakeNode is what a Cache is given, with a clock the test moves and a
// fetch the test answers.
type fakeNode struct {
	clock               atomic.Int64
	late, leases, slots atomic.Uint64
	wg                  sync.WaitGroup
	fetches             atomic.Int32
	lastWait            atomic.Int64 // the maxWait of the latest fetch
	fetch               func(call int32) (wire.Lease, error)
	fallback            atomic.Bool
	epoch               time.Time
	cancel              context.CancelFunc
	ctx                 context.Context
}

func newFake(t *testing.T, horizon time.Duration, fetch func(call int32) (wire.Lease, error)) (*fakeNode, *Cache) {
	f := &fakeNode{fetch: fetch, epoch: time.Now()}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { f.cancel(); f.wg.Wait() })
	c := New(Deps{
		UseGrace:     50 * time.Millisecond,
		HorizonAhead: horizon,
		LeaseSpan:    100 * time.Millisecond,
		Now:          f.clock.Load,
		Epoch:        f.epoch,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Count:        Counters{LateGrants: &f.late, Leases: &f.leases, LeasedSlots: &f.slots},
		Ctx:          f.ctx,
		WG:           &f.wg,
		Sleep:        func(ctx context.Context, d time.Duration) error { return ctx.Err() },
		BackoffMin:   time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
		Fetch: func(ctx context.Context, key string, want int, maxWait time.Duration) (wire.Lease, int64, error) {
			f.lastWait.Store(int64(maxWait))
			l, err := f.fetch(f.fetches.Add(1))
			return l, 0, err
		},
		Retryable:  func(err error) bool { return errors.Is(err, wire.ErrRetry) },
		InFallback: f.fallback.Load,
	})
	return f, c
}

// A slot already further away than a prefetch accepts (HorizonAhead/2)
// starts no prefetch: the next slot is later still. A near one does.
func TestCache_PrefetchOnlyWhenItCanSucceed(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, tc := range []struct {
		name    string
		base    int64
		fetches int32
	}{
		{"far slot: no prefetch", 600 * ms, 1},
		{"near slot: prefetch", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFake(t, time.Second, func(int32) (wire.Lease, error) {
				return wire.Lease{Base: tc.base, Spacing: 500 * ms, Count: 1}, nil
			})
			r, err := c.Reserve(context.Background(), "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if want := f.epoch.Add(time.Duration(tc.base)); !r.At.Equal(want) {
				t.Errorf("At %v, want %v", r.At.Sub(f.epoch), want.Sub(f.epoch))
			}
			f.wg.Wait()
			if got := f.fetches.Load(); got != tc.fetches {
				t.Errorf("%d fetches, want %d", got, tc.fetches)
			}
		})
	}
}

// A caller that takes only a slot due now (maxWait 0) and is refused
// leaves a fetch behind that accepts slots half the horizon ahead, so the
// next such caller finds one due; a caller that would wait is refused
// without one (it asked with its own wait already).
func TestCache_RefusedNowKeepsALeaseComing(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
		fetches int32
	}{
		{"maxWait 0: a lease keeps coming", 0, 2},
		{"maxWait 100ms: nothing more", 100 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFake(t, time.Second, func(call int32) (wire.Lease, error) {
				if call == 1 {
					return wire.Lease{}, &raftpace.LimitExceededError{Key: "k", Wait: 300 * time.Millisecond}
				}
				return wire.Lease{Base: 300 * ms, Spacing: 100 * ms, Count: 2}, nil
			})
			_, err := c.Reserve(context.Background(), "k", tc.maxWait)
			if !errors.Is(err, raftpace.ErrLimitExceeded) {
				t.Fatalf("the leader refused: %v, want ErrLimitExceeded", err)
			}
			f.wg.Wait()
			if got := f.fetches.Load(); got != tc.fetches {
				t.Fatalf("%d fetches, want %d", got, tc.fetches)
			}
			if tc.fetches == 1 {
				return
			}
			if got := time.Duration(f.lastWait.Load()); got != 500*time.Millisecond {
				t.Errorf("the fetch left behind accepts %v, want half the horizon, 500ms", got)
			}
			f.clock.Store(300 * ms)
			r, err := c.Reserve(context.Background(), "k", 0)
			if err != nil {
				t.Fatalf("at the lease's first slot, maxWait 0: %v", err)
			}
			if want := f.epoch.Add(300 * time.Millisecond); !r.At.Equal(want) {
				t.Errorf("At %v, want %v", r.At.Sub(f.epoch), want.Sub(f.epoch))
			}
		})
	}
}

// A fetch slower than the caller's maximum wait still serves the caller
// when its lease holds a slot free now: the slot is within any maximum
// wait (a 1 ms max wait over a loaded loopback failed with "limit
// exceeded: would wait 90us, maximum 1ms").
func TestCache_SlowFetchStillServesAFreeSlot(t *testing.T) {
	const ms = int64(time.Millisecond)
	var f *fakeNode
	f, c := newFake(t, time.Second, func(call int32) (wire.Lease, error) {
		f.clock.Add(5 * ms) // the round trip outlasts the max wait
		return wire.Lease{Spacing: ms, Count: 1}, nil
	})
	r, err := c.Reserve(context.Background(), "k", time.Millisecond)
	if err != nil {
		t.Fatalf("slot free on arrival, max wait 1ms: %v", err)
	}
	if want := f.epoch.Add(5 * time.Millisecond); !r.At.Equal(want) {
		t.Errorf("At %v, want on arrival %v", r.At.Sub(f.epoch), want.Sub(f.epoch))
	}
}

// A lease whose every use-by passed in transit is dropped, counted, and
// asked for again; never served.
func TestCache_LateLeaseDropped(t *testing.T) {
	const ms = int64(time.Millisecond)
	var f *fakeNode
	f, c := newFake(t, time.Second, func(call int32) (wire.Lease, error) {
		if call == 1 {
			f.clock.Add(100 * ms) // past UseGrace (50ms) in transit
		}
		return wire.Lease{Spacing: ms, Count: 1}, nil
	})
	r, err := c.Reserve(context.Background(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.fetches.Load() < 2 || f.late.Load() != 1 || f.leases.Load() < 1 {
		t.Fatalf("fetches %d, late %d, leases %d: want the late lease dropped and a second one served",
			f.fetches.Load(), f.late.Load(), f.leases.Load())
	}
	if want := f.epoch.Add(100 * time.Millisecond); !r.At.Equal(want) || !r.UseBy.Equal(want.Add(50*time.Millisecond)) {
		t.Errorf("got At %v UseBy %v, want %v and 50ms later", r.At.Sub(f.epoch), r.UseBy.Sub(f.epoch), want.Sub(f.epoch))
	}
}

// A retryable failure while the node has fallen back ends the
// reservation with ErrModeChanged (the node dispatches again).
func TestCache_FallbackStopsRetrying(t *testing.T) {
	f, c := newFake(t, time.Second, func(int32) (wire.Lease, error) { return wire.Lease{}, wire.ErrRetry })
	f.fallback.Store(true)
	if _, err := c.Reserve(context.Background(), "k", time.Second); !errors.Is(err, ErrModeChanged) {
		t.Fatalf("got %v, want ErrModeChanged", err)
	}
}

// Keys idle for IdleAfter leave the cache once it has grown to its next
// sweep; a key still holding slots to serve, or asked recently, stays.
func TestCache_IdleKeysLeave(t *testing.T) {
	f, c := newFake(t, time.Second, func(int32) (wire.Lease, error) {
		return wire.Lease{Base: 0, Spacing: int64(time.Second), Count: 1}, nil
	})
	f.clock.Store(int64(time.Hour))
	ctx := context.Background()
	for i := range minSweep {
		if _, err := c.Reserve(ctx, fmt.Sprintf("old%d", i), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	f.wg.Wait()
	// A key whose lease still has a slot to serve a minute from now.
	c.mu.Lock()
	kl := c.by["old0"]
	c.mu.Unlock()
	kl.mu.Lock()
	kl.queued = 0
	kl.install(wire.Lease{Base: int64(2 * IdleAfter), Spacing: 1, Count: 1}, f.clock.Load(), f.clock.Load())
	kl.mu.Unlock()

	f.clock.Add(int64(IdleAfter + time.Second))
	if _, err := c.Reserve(ctx, "old1", time.Second); err != nil { // asked again: stays
		t.Fatal(err)
	}
	f.wg.Wait()
	if _, err := c.Reserve(ctx, "new", time.Second); err != nil { // the sweep
		t.Fatal(err)
	}
	f.wg.Wait()
	if got := c.Keys(); got != 3 {
		t.Errorf("keys after the sweep = %d, want 3 (old0 with a slot ahead, old1 asked again, new)", got)
	}
}
