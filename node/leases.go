package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace/node/batch"
	"github.com/raftpace/raftpace/node/lease"
	"github.com/raftpace/raftpace/node/wire"
	"github.com/raftpace/raftpace/transport"
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

// fetchLease asks the leader (itself, or by a message of many requests:
// package node/batch) for up to want slots.
func (n *Node) fetchLease(ctx context.Context, key string, want int, maxWait time.Duration) (wire.Lease, int64, error) {
	l, at, err := n.pacer.LeaseAt(ctx, n.ctx.Done(), key, n.cfg.NodeID, want, maxWait)
	if !errors.Is(err, wire.ErrNotLeader) {
		if err == nil {
			// On one clock, with no network between: stated as it
			// arrives, a grant's wait for this goroutine (descheduled,
			// a GC pause) costs none of UseGrace.
			l = l.Restated(n.now() - at)
		}
		return l, 0, err
	}
	n.stats.forwarded.Add(1)
	resp, arrived, err := n.batchClient.Lease(ctx, key, want, maxWait)
	if err == nil {
		err = n.grantErr(fmt.Sprintf("lease %q", key), key, resp.Code, resp.Wait, maxWait, resp.Msg)
	}
	return resp.Lease, arrived, err
}

// newBatch builds both sides of the lease batches (package node/batch).
func (n *Node) newBatch() (*batch.Server, *batch.Client) {
	srv := batch.NewServer(batch.Grants{Pacer: n.pacer, Paused: n.PausedFor, Now: n.now, Epoch: n.epoch.UnixNano(), Done: n.ctx.Done(), WG: &n.wg})
	call := func(ctx context.Context, method uint8, req []byte, maxWait time.Duration) ([]byte, string, error) {
		raw, addr, err := n.lc.Raw(ctx, "lease", method, req, maxWait)
		if errors.As(err, new(*transport.RemoteError)) {
			err = fmt.Errorf("%w: %w", batch.ErrNoBatches, err)
		}
		return raw, addr, err
	}
	return srv, batch.NewClient(n.cfg.NodeID, call, n.now)
}
