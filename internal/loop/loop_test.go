package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEvery_TicksKicksAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kick := make(chan struct{})
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A period far longer than the test: only kicks call fn.
		Every(ctx, time.Hour, kick, func() bool { return calls.Add(1) < 3 })
	}()
	for range 3 {
		kick <- struct{}{}
	}
	select {
	case <-done: // fn returned false on the third call
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not stop when fn returned false")
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("fn called %d times, want 3", n)
	}
}

func TestEvery_StopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, nil, func() bool {
			if calls.Add(1) == 5 {
				cancel()
			}
			return true
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not stop when its context ended")
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("fn called %d times after its context ended, want 5 in all", n)
	}
}
