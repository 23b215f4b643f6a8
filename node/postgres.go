package node

import (
	"context"
	"time"

	"github.com/raftpace/raftpace/node/pglink"
)

// The link to Postgres (the checkpoint, the restore of a fresh cluster,
// discovery, the pool and the witness) lives in package node/pglink (its
// doc says what it promises). Here is the node's side of it: what the link
// is given, and the leader's restore before it grants.

// newPGLink builds the node's link to Postgres (only with PostgresURL).
// Everything it is given is read through n when called.
func (n *Node) newPGLink() *pglink.Link {
	cfg := n.cfg
	return pglink.New(pglink.Config{
		URL:               cfg.PostgresURL,
		Schema:            cfg.PostgresSchema,
		Cluster:           cfg.ClusterName,
		NodeID:            cfg.NodeID,
		CheckpointEvery:   cfg.CheckpointEvery,
		PoolTTL:           poolTTL,
		RestoreLimitsOnly: cfg.Unsafe.RestoreLimitsOnly,
	}, pglink.Deps{
		Log:          n.log,
		Now:          n.now,
		Ctx:          n.ctx,
		Addr:         n.Addr,
		GossipAddr:   n.GossipAddr,
		State:        n.state,
		Horizon:      func(key string) (int64, bool) { return n.fsm.Horizon(key) },
		Pause:        func(key string) (int64, bool) { return n.appliedPauses.Get(key) },
		Pauses:       func() map[string]int64 { return n.appliedPauses.All() },
		PauseMu:      &n.pauseMu,
		HorizonsIn:   n.horizonsIn,
		Granting:     func() bool { return n.pacer.IsLeading() },
		SameGen:      func(gen uint64) bool { return n.pacer.SameGen(gen) },
		FreshStart:   func() bool { return n.freshStart },
		Commit:       n.commitNow,
		CommitWithin: n.commit,
		SetLimit:     n.applyLimit,
		Sleep:        func(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, n.ctx, d) },
	})
}

// horizonsIn is the pacer's committed horizon of each key minus now, as
// the checkpoint reads it.
func (n *Node) horizonsIn() map[string]time.Duration {
	views := n.pacer.View()
	out := make(map[string]time.Duration, len(views))
	for key, v := range views {
		out[key] = v.HorizonIn
	}
	return out
}

// postgresLoop publishes this node's addresses and, on the leader, writes
// the checkpoint (pglink.Link.Loop).
func (n *Node) postgresLoop() {
	defer n.wg.Done()
	n.pg.Loop()
}

// restoreBeforeLeading runs the checkpoint restore when this leader heads a
// cluster that started empty (pglink.Link.RestoreBeforeLeading). It
// reports whether to go on leading.
func (n *Node) restoreBeforeLeading(gen uint64) bool {
	if n.pg == nil {
		return true
	}
	return n.pg.RestoreBeforeLeading(gen)
}
