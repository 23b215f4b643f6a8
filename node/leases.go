package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace/node/lease"
	"github.com/raftpace/raftpace/node/wire"
)

// The lease cache lives in package node/lease (its doc says what it
// promises). Here is the node's side of it: what the cache is given, and
// how a lease is fetched: from the node's own pacer when it leads, else
// from the leader by the node's one path to it (leadercall.go).

// newLeases builds the node's lease cache. It needs n's config, epoch and
// lifetime (set in New); everything else it reads through n when called.
func (n *Node) newLeases() *lease.Cache {
	return lease.New(lease.Deps{
		UseGrace:     n.cfg.UseGrace,
		HorizonAhead: n.cfg.HorizonAhead,
		LeaseSpan:    n.cfg.LeaseSpan,
		SpendExpired: n.cfg.Unsafe.SpendExpired,
		Now:          n.now,
		Epoch:        n.epoch,
		Log:          n.log,
		Count: lease.Counters{
			LateGrants:  &n.stats.lateGrants,
			Leases:      &n.stats.leases,
			LeasedSlots: &n.stats.leasedSlots,
		},
		Ctx:        n.ctx,
		WG:         &n.wg,
		Sleep:      func(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, n.ctx, d) },
		BackoffMin: wire.RetryBackoffMin,
		BackoffMax: wire.RetryBackoffMax,
		Fetch:      n.fetchLease,
		Retryable:  wire.Retryable,
		InFallback: n.inFallback,
	})
}

// fetchLease asks the leader (itself, or over RPC through n.leaseWire) for up to want slots.
func (n *Node) fetchLease(ctx context.Context, key string, want int, maxWait time.Duration) (wire.Lease, error) {
	l, at, err := n.pacer.LeaseAt(ctx, n.ctx.Done(), key, n.cfg.NodeID, want, maxWait)
	if !errors.Is(err, wire.ErrNotLeader) {
		if err == nil {
			// On one clock, with no network between: stated as it
			// arrives, a grant's wait for this goroutine (descheduled,
			// a GC pause) costs none of UseGrace.
			l = l.Restated(n.now() - at)
		}
		return l, err
	}
	return n.leaseWire.Send(ctx, key, maxWait, func() (wire.Lease, error) {
		what := fmt.Sprintf("lease %q", key)
		var resp wire.LeaseResp
		err := n.callLeaderWithin(ctx, what, wire.MethodLease, wire.LeaseReq{Key: key, Holder: n.cfg.NodeID, Count: want, MaxWait: maxWait}.Encode(), maxWait, func(raw []byte) (err error) {
			resp, err = wire.DecodeLeaseResp(raw)
			return err
		})
		if err == nil {
			err = n.grantErr(what, key, resp.Code, resp.Wait, maxWait, resp.Msg)
		}
		return resp.Lease, err
	})
}
