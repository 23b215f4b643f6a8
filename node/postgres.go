package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// pgLink is a node's optional link to Postgres (DESIGN 6): the checkpoint
// the leader writes, the restore of a cluster started with empty data dirs,
// address publishing for discovery, and the pooled fallback cursor.
//
// Postgres being down is an event to log and survive: the link opens in
// the background and reopens after failures; nothing waits on it except
// the one thing that must, a fresh cluster's restore (it grants nothing
// for keys it does not know, so waiting is safe).
type pgLink struct {
	n    *Node
	kick chan struct{}

	mu    sync.Mutex
	store *pgstore.Store
	up    bool // last call succeeded
}

func newPGLink(n *Node) *pgLink { return &pgLink{n: n, kick: make(chan struct{}, 1)} }

// changed asks for a checkpoint soon (a limit or member changed).
func (p *pgLink) changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// get returns the open store, opening it if needed.
func (p *pgLink) get(ctx context.Context) (*pgstore.Store, error) {
	p.mu.Lock()
	s := p.store
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := pgstore.Open(ctx, pgstore.Config{
		URL:     p.n.cfg.PostgresURL,
		Schema:  p.n.cfg.PostgresSchema,
		Cluster: p.n.cfg.ClusterName,
		Logger:  p.n.log.With("component", "postgres"),
	})
	if err != nil {
		p.note(err)
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store != nil {
		s.Close()
		return p.store, nil
	}
	p.store = s
	return s, nil
}

// note records the outcome of a call and logs when reachability changes.
func (p *pgLink) note(err error) {
	up := err == nil || !errors.Is(err, pgstore.ErrUnavailable)
	p.mu.Lock()
	changed := up != p.up
	p.up = up
	p.mu.Unlock()
	switch {
	case changed && up:
		p.n.log.Info("postgres reachable")
	case changed:
		p.n.log.Warn("postgres unreachable", "err", err)
	}
}

func (p *pgLink) reachable() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

func (p *pgLink) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store != nil {
		p.store.Close()
		p.store = nil
	}
}

// postgresLoop publishes this node's addresses and, on the leader, writes
// the checkpoint every CheckpointEvery and soon after every change.
func (n *Node) postgresLoop() {
	defer n.wg.Done()
	lastPublish := time.Time{}
	loop.Every(n.ctx, n.cfg.CheckpointEvery, n.pg.kick, func() bool {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		s, err := n.pg.get(ctx)
		if err == nil && time.Since(lastPublish) > 10*time.Second {
			err = s.PublishAddress(ctx, n.cfg.NodeID, n.Addr(), n.GossipAddr())
			n.pg.note(err)
			if err == nil {
				lastPublish = time.Now()
			}
		}
		if err == nil && n.pacer.IsLeading() && !n.restorePending.Load() {
			err = s.SaveCheckpoint(ctx, n.checkpoint())
			n.pg.note(err)
			if err != nil && !errors.Is(err, pgstore.ErrUnavailable) {
				n.log.Error("checkpoint refused", "err", err)
			}
		}
		cancel()
		return true
	})
}

// checkpoint is the state a restart from empty data dirs needs: limits,
// members, concurrency caps, per key how far ahead of now its horizon lies
// (the leader's committed horizon, or the one this node measured, whichever
// is later), and per key how long its refusal pause still runs on this
// node's clock (pauses already over are left out).
func (n *Node) checkpoint() pgstore.Checkpoint {
	cp := pgstore.Checkpoint{
		Limits:   n.state.Limits(),
		Members:  n.state.Members(),
		Horizons: make(map[string]time.Duration),
		Caps:     n.state.Caps(),
		Pauses:   make(map[string]time.Duration),
	}
	now := n.now()
	views := n.pacer.View()
	for key := range n.state.Horizons() {
		h, _ := n.fsm.Horizon(key)
		if v, ok := views[key]; ok && now+int64(v.HorizonIn) > h {
			h = now + int64(v.HorizonIn)
		}
		ahead := time.Duration(max(0, h-now))
		cp.Horizons[key] = min(ahead, fsm.MaxHorizonAhead)
	}
	for key, end := range n.appliedPauses.All() {
		if end > now {
			cp.Pauses[key] = min(time.Duration(end-now), fsm.MaxPause)
		}
	}
	return cp
}

// restore fills a brand-new cluster's empty state from the checkpoint:
// horizons first (so no key can start before the old cluster's last
// grants), then limits, concurrency caps and refusal pauses. It runs on a
// leader that started with empty data dirs before it grants anything; until
// it succeeds (Postgres may be down) the cluster has no limits and admits
// nothing, and no checkpoint is written over the one it needs.
func (n *Node) restore(ctx context.Context) error {
	s, err := n.pg.get(ctx)
	if err != nil {
		return err
	}
	cp, found, err := s.LoadCheckpoint(ctx)
	n.pg.note(err)
	if err != nil {
		return err
	}
	if !found {
		n.log.Info("no checkpoint in postgres: starting with no limits")
		return nil
	}
	var ext fsm.ExtendHorizons
	for key, ahead := range cp.Horizons {
		if ahead > 0 && !n.cfg.Unsafe.RestoreLimitsOnly {
			ext.Entries = append(ext.Entries, fsm.HorizonEntry{Key: key, Ahead: ahead})
		}
	}
	if len(ext.Entries) > 0 {
		if _, err := n.commit(&ext, 10*time.Second); err != nil {
			return fmt.Errorf("node: restore horizons: %w", err)
		}
	}
	for key, lim := range cp.Limits {
		if _, err := n.applyLimit(key, lim); err != nil {
			return fmt.Errorf("node: restore limit %q: %w", key, err)
		}
	}
	for key, max := range cp.Caps {
		if _, err := n.commit(&fsm.SetCap{Key: key, Max: max}, commitTimeout); err != nil {
			return fmt.Errorf("node: restore cap %q: %w", key, err)
		}
	}
	pauses, err := n.restorePauses(cp.Pauses)
	if err != nil {
		return err
	}
	n.log.Info("restored from the postgres checkpoint", "limits", len(cp.Limits), "horizons", len(ext.Entries),
		"caps", len(cp.Caps), "pauses", pauses)
	return nil
}

// restorePauses commits a SetPause for each pause of the checkpoint and
// returns how many it committed. Each is the time the pause still ran when
// LoadCheckpoint read it on Postgres's clock; the entry measures it again
// from this cluster's apply, which comes at or after that reading, so a
// restored pause ends no earlier than the old cluster's did: it can only
// last longer, which is safe (it errs on the side of the refusal).
//
// Like leaderPause it takes the maximum under pauseMu: a Pause that reached
// this leader while it restored and reaches further is kept, not shortened.
func (n *Node) restorePauses(pauses map[string]time.Duration) (int, error) {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	count := 0
	for key, d := range pauses {
		if end, ok := n.appliedPauses.Get(key); ok && end >= n.now()+int64(d) {
			continue // a longer pause is already in force
		}
		if _, err := n.commit(&fsm.SetPause{Key: key, For: d}, commitTimeout); err != nil {
			return count, fmt.Errorf("node: restore pause %q: %w", key, err)
		}
		count++
	}
	return count, nil
}

// discoverJoin returns gossip addresses published in Postgres in the last
// minute, other than this node's.
func (n *Node) discoverJoin(ctx context.Context) []string {
	s, err := n.pg.get(ctx)
	if err != nil {
		return nil
	}
	addrs, err := s.DiscoverGossip(ctx, time.Minute)
	n.pg.note(err)
	var out []string
	for _, a := range addrs {
		if a != n.GossipAddr() {
			out = append(out, a)
		}
	}
	return out
}

// restoreBeforeLeading runs the checkpoint restore when this leader heads a
// cluster that started empty; it retries until it succeeds or leadership
// moves on (gen changes). It reports whether to go on leading.
func (n *Node) restoreBeforeLeading(gen uint64) bool {
	if n.pg == nil || !n.freshStart || len(n.state.Limits()) > 0 || len(n.state.Horizons()) > 0 {
		return true
	}
	n.restorePending.Store(true)
	defer n.restorePending.Store(false)
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		err := n.restore(ctx)
		cancel()
		if err == nil {
			return true
		}
		n.log.Warn("cannot restore the new cluster from postgres yet; granting nothing until it can", "err", err)
		if sleepCtx(context.Background(), n.ctx, backoff) != nil || !n.pacer.SameGen(gen) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (p *pgLink) joinPool(ctx context.Context, id string, fraction float64) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	err = s.JoinPool(ctx, id, fraction, poolTTL)
	p.note(err)
	return err
}

func (p *pgLink) leavePool(ctx context.Context, id string) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	_, err = s.LeavePool(ctx, id)
	p.note(err)
	return err
}

// leavePoolBusy leaves the pool and returns how far the pool's cursors
// reach past the answer (see pgstore.Store.LeavePool).
func (p *pgLink) leavePoolBusy(ctx context.Context, id string) (time.Duration, error) {
	s, err := p.get(ctx)
	if err != nil {
		return 0, err
	}
	busy, err := s.LeavePool(ctx, id)
	p.note(err)
	return busy, err
}

func (p *pgLink) reservePooled(ctx context.Context, key string, lim fsm.Limit, count int, maxWait time.Duration) (time.Duration, error) {
	s, err := p.get(ctx)
	if err != nil {
		return 0, err
	}
	wait, err := s.ReservePooled(ctx, p.n.cfg.NodeID, key, lim, count, maxWait)
	p.note(err)
	return wait, err
}

// heartbeat tells the witness this node is alive and returns whether a
// leader fenced it.
func (p *pgLink) heartbeat(ctx context.Context, id string) (bool, error) {
	s, err := p.get(ctx)
	if err != nil {
		return false, err
	}
	fenced, err := s.Witness(ctx, id)
	p.note(err)
	return fenced, err
}

// fence asks the witness to fence member id if Postgres has not heard from
// it for stale; see pgstore.Store.Fence.
func (p *pgLink) fence(ctx context.Context, id string, stale, licence time.Duration) (pgstore.FenceResult, error) {
	s, err := p.get(ctx)
	if err != nil {
		return pgstore.FenceResult{}, err
	}
	res, err := s.Fence(ctx, id, stale, licence)
	p.note(err)
	return res, err
}

// unfence lifts the fence on member id.
func (p *pgLink) unfence(ctx context.Context, id string) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	err = s.Unfence(ctx, id)
	p.note(err)
	return err
}
