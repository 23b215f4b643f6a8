package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPark_WaitingRequestsLeaveTheRunningBound: with more requests waiting
// on a peer's connections than maxInflightPerConn allows each, a parked
// server still reads and answers the next call; the twin that does not
// park shows the bound it escapes (the echo waits behind the blocked).
func TestPark_WaitingRequestsLeaveTheRunningBound(t *testing.T) {
	for _, park := range []bool{true, false} {
		t.Run(map[bool]string{true: "parked", false: "not parked"}[park], func(t *testing.T) {
			release := make(chan struct{})
			var started atomic.Int32
			var parkFailed int
			var mu sync.Mutex
			handler := func(ctx context.Context, method uint8, req []byte) ([]byte, error) {
				if method != mBlock {
					return req, nil
				}
				if park && !Park(ctx) {
					mu.Lock()
					parkFailed++
					mu.Unlock()
				}
				started.Add(1)
				select {
				case <-release:
					return []byte("released"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			srv := newTransport(t, Config{Handler: handler})
			cli := newTransport(t, Config{})
			addr := srv.Addr().String()
			mustCall(t, cli, addr, "warm") // both ends up before the flood

			blocked := maxConnsPerPeer*maxInflightPerConn + 64
			var done sync.WaitGroup
			errs := make(chan error, blocked)
			for i := range blocked {
				done.Add(1)
				go func() {
					defer done.Done()
					resp, err := cli.Call(ctxTimeout(t, 20*time.Second), addr, mBlock, nil)
					if err == nil && string(resp) != "released" {
						err = errors.New("answer " + string(resp))
					}
					errs <- err
				}()
				if i < maxConnsPerPeer {
					// One at a time until every pooled connection is
					// open: the rest then spread evenly over them, each
					// past the running bound.
					waitFor(t, "a connection's first blocked request", func() bool { return started.Load() > int32(i) })
				}
			}
			// At least the running bound's worth arrived (all of them when
			// parked).
			waitFor(t, "blocked requests started", func() bool {
				return started.Load() >= maxConnsPerPeer*maxInflightPerConn
			})

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := cli.Call(ctx, addr, mEcho, []byte("through"))
			close(release)
			done.Wait()
			close(errs)
			for e := range errs {
				if e != nil {
					t.Fatalf("a blocked call: %v", e)
				}
			}
			if park {
				if err != nil || string(resp) != "through" {
					t.Fatalf("echo behind %d parked requests: %q, %v; want an answer", blocked, resp, err)
				}
				if parkFailed > 0 {
					t.Fatalf("Park refused %d requests under the parked bound", parkFailed)
				}
				return
			}
			if err == nil {
				t.Fatalf("echo answered behind %d requests holding the running bound; the twin shows nothing", blocked)
			}
		})
	}
}

func TestPark_OutsideARequestDoesNothing(t *testing.T) {
	if Park(context.Background()) {
		t.Fatal("Park outside a served request reported parked")
	}
}
