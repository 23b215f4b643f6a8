package node

import (
	"context"
	"time"

	"github.com/raftpace/raftpace/node/fallback"
)

// The member's side of the share lease, its fallback, lives in package
// node/fallback (its doc says what it promises). Here is the node's side
// of it: what the fallback is given, and the names node has always
// exported for its modes.

// Mode is how a node admits events.
type Mode = fallback.Mode

const (
	// ModeRaft: the node holds a share promise to a leader; its callers are
	// served from the leader's grants.
	ModeRaft = fallback.ModeRaft
	// ModeLocal: no leader renewed its share within ShareTTL; the node paces
	// its own callers at its fallback fraction of each key's rate.
	ModeLocal = fallback.ModeLocal
	// ModeStopped: the node was in fallback for FallbackFor; it admits
	// nothing until a leader renews its share (so a member that may be
	// reaped has stopped spending its fraction before it is).
	ModeStopped = fallback.ModeStopped
	// ModePooled: in fallback, with Postgres reachable: the node's fraction
	// is pooled with the other members in fallback that reach it, on one
	// cursor per key kept by Postgres's clock.
	ModePooled = fallback.ModePooled
)

// The pool's registration TTL and longest wait (package fallback says why
// they bound when the pool stops spending a member's fraction): the
// registration the node's Postgres link makes, and Config's check of
// ReapMargin, use them too.
const (
	poolTTL     = fallback.PoolTTL
	poolMaxWait = fallback.PoolMaxWait
)

// errPoolPending: the node is deciding between pooled and local fallback
// (or rejoining the pool); the caller retries shortly.
var errPoolPending = fallback.ErrPoolPending

// newFallback builds the node's fallback. It reads n.pg when called: New
// sets it (with PostgresURL) right after, before anything runs.
func (n *Node) newFallback() *fallback.Fallback {
	var pool *fallback.Pool
	if n.cfg.PostgresURL != "" {
		pool = &fallback.Pool{
			Reachable: func() bool { return n.pg.Reachable() },
			Join: func(ctx context.Context, id string, fraction float64) error {
				return n.pg.JoinPool(ctx, id, fraction)
			},
			LeaveBusy: func(ctx context.Context, id string) (time.Duration, error) {
				return n.pg.LeavePoolBusy(ctx, id)
			},
			Reserve: func(ctx context.Context, wants []fallback.PoolWant, maxWait time.Duration) (time.Duration, error) {
				return n.pg.ReservePooled(ctx, wants, maxWait) // n.pg is set after this runs
			},
			Heartbeat: func(ctx context.Context, id string) (bool, error) { return n.pg.Heartbeat(ctx, id) },
		}
	}
	return fallback.New(fallback.Config{
		NodeID:      n.cfg.NodeID,
		ShareTTL:    n.cfg.ShareTTL,
		FallbackFor: n.cfg.FallbackFor,
		UseGrace:    n.cfg.UseGrace,
		MaxSlotTTL:  n.cfg.MaxSlotTTL,
		WitnessTTL:  n.cfg.WitnessTTL,
		Witnessed:   n.cfg.witnessed(),
		FullRate:    n.cfg.Unsafe.FallbackFullRate,
	}, fallback.Deps{
		Now:      n.now,
		Epoch:    n.epoch,
		Log:      n.log,
		State:    n.state,
		Fraction: n.ownFraction,
		Pool:     pool,
		Ctx:      n.ctx,
		WG:       &n.wg,
	})
}

// ownFraction is this node's committed fallback fraction.
func (n *Node) ownFraction() float64 {
	for _, m := range n.state.Members() {
		if m.ID == n.cfg.NodeID {
			return m.Fraction
		}
	}
	return 0
}
