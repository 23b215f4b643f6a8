package batch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// InFlight bounds a node's single lease requests (wire.MethodLease, to a
// leader of an older build) on the wire at once. A request that waits
// here, before it is sent, loses nothing: the wait counts as part of the
// leader's hold (Lease.Held), so its slots' use-by is measured from when
// it left. A request's transit must stay within UseGrace, and a burst of
// a thousand requests at once (a slow key each, all hungry) came back over
// 65-150 ms: every lease was dropped as late and asked for again,
// together. Bounded at 32, they were not; messages of many requests
// (Client) need no such bound.
type InFlight struct{ slots chan struct{} }

// MaxInFlight is the bound a node's InFlight has.
const MaxInFlight = 32

// NewInFlight returns a bound of n requests on the wire.
func NewInFlight(n int) *InFlight { return &InFlight{slots: make(chan struct{}, n)} }

// Send calls send, the request of a lease of key, once fewer than the bound
// are on the wire, and adds the time it waited to the lease's Held. A wait
// that outlasts ctx's deadline (the caller's maxWait) ends in a
// *raftpace.LimitExceededError: nothing was asked or consumed.
func (f *InFlight) Send(ctx context.Context, key string, maxWait time.Duration, send func() (wire.Lease, error)) (wire.Lease, error) {
	queued := time.Now()
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return wire.Lease{}, &raftpace.LimitExceededError{Key: key, Wait: maxWait, MaxWait: maxWait}
		}
		return wire.Lease{}, fmt.Errorf("node: lease %q: %w", key, ctx.Err())
	}
	defer func() { <-f.slots }()
	waited := time.Since(queued)
	l, err := send()
	l.Held += int64(waited)
	return l, err
}
