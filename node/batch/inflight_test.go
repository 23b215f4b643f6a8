package batch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// At most the bound are sent at once; a request that waited for a turn has
// the wait added to its lease's Held (its slots' use-by counts from when
// it left); one whose deadline passes while it waits is refused unsent.
func TestInFlight_BoundsAndCountsTheWait(t *testing.T) {
	f := NewInFlight(2)
	var on, most atomic.Int32
	release := make(chan struct{})
	send := func() (wire.Lease, error) {
		n := on.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		on.Add(-1)
		return wire.Lease{Count: 1, Held: int64(time.Millisecond)}, nil
	}
	var wg sync.WaitGroup
	helds := make([]int64, 5)
	for i := range helds {
		wg.Go(func() {
			l, err := f.Send(context.Background(), "k", time.Second, send)
			if err != nil {
				t.Error(err)
			}
			helds[i] = l.Held
		})
	}
	// The third caller waits; a caller whose deadline passes meanwhile is
	// refused without being sent.
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	sent := false
	_, err := f.Send(ctx, "k", 20*time.Millisecond, func() (wire.Lease, error) { sent = true; return wire.Lease{}, nil })
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || sent {
		t.Errorf("deadline passed while waiting: %v, sent %v; want LimitExceededError, not sent", err, sent)
	}
	close(release)
	wg.Wait()
	if most.Load() != 2 {
		t.Errorf("%d requests on the wire at once, want the bound 2", most.Load())
	}
	waited := 0
	for _, h := range helds {
		if h > int64(50*time.Millisecond) { // queued behind the first two
			waited++
		}
	}
	if waited != 3 {
		t.Errorf("Held per request %v: want 3 with the wait (>50ms) added", helds)
	}
}
