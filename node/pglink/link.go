package pglink

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// Config is what the link is configured with (the node's Config, as it
// was read by package node).
type Config struct {
	URL, Schema, Cluster string // the store: pgstore.Config
	NodeID               string
	CheckpointEvery      time.Duration
	PoolTTL              time.Duration // the pool registration's TTL (fallback.PoolTTL)
	// RestoreLimitsOnly (Unsafe): restore ignores the checkpoint's horizons.
	RestoreLimitsOnly bool
}

// Deps is what the node gives the link instead of itself. Every func is
// called when needed, never while New runs, so it may read node fields set
// after New returns.
type Deps struct {
	Log *slog.Logger // the node's logger
	Now func() int64 // the node's monotonic clock, ns

	Ctx context.Context // the node's: cancelled when it closes

	Addr       func() string // this node's raft and RPC address
	GossipAddr func() string // this node's gossip address

	// State is the node's applied state: limits, members, caps, and which
	// keys have horizons.
	State *fsm.State
	// Horizon is a key's local horizon as this node measured it from its
	// apply (the fsm adapter's).
	Horizon func(key string) (int64, bool)
	// Pause is a key's applied pause deadline (node clock); Pauses all of
	// them. Both read the deadlines the gate reads.
	Pause  func(key string) (int64, bool)
	Pauses func() map[string]int64
	// PauseMu is the leader's pause lock (the gate's): restore holds it so
	// a longer pause asked meanwhile is kept, not shortened.
	PauseMu *sync.Mutex
	// HorizonsIn is the pacer's view of each key's committed horizon minus
	// now (pacer.View's HorizonIn; zero when not leading).
	HorizonsIn func() map[string]time.Duration

	Granting func() bool           // the pacer leads (grants)
	SameGen  func(gen uint64) bool // leadership is still pacer generation gen
	// FreshStart: the node started with no raft state.
	FreshStart func() bool

	// Commit commits c through raft on this node (the leader) within the
	// node's commitTimeout; CommitWithin within timeout. SetLimit commits a
	// limit as SetLimit does on the leader (its errors say "set limit").
	Commit       func(c fsm.Command) (uint64, error)
	CommitWithin func(c fsm.Command, timeout time.Duration) (uint64, error)
	SetLimit     func(key string, lim fsm.Limit) (uint64, error)

	// Sleep waits d, or less if ctx ends (ctx's error) or the node closes
	// (an error).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Link is a node's optional link to Postgres (DESIGN 6): the checkpoint
// the leader writes, the restore of a cluster started with empty data dirs,
// address publishing for discovery, and the pooled fallback cursor.
//
// Postgres being down is an event to log and survive: the link opens in
// the background and reopens after failures; nothing waits on it except
// the one thing that must, a fresh cluster's restore (it grants nothing
// for keys it does not know, so waiting is safe).
type Link struct {
	cfg  Config
	d    Deps
	kick chan struct{}
	// restorePending: this node leads a new cluster whose state must first
	// be restored from the checkpoint.
	restorePending atomic.Bool

	mu    sync.Mutex
	store *pgstore.Store
	state reach // what the last call found
}

// reach is what the link's last call to Postgres found.
type reach int

const (
	reachUnknown reach = iota // no call yet
	reachUp                   // Postgres answered (an answer may be a refusal of the request: fenced, no pool, a wait too long)
	reachDown                 // it could not be reached or did not answer (pgstore.ErrUnavailable)
	reachRefused              // it answered with an error no retry mends: a database missing, a password or a privilege refused
)

// New returns the link; nothing is opened until it is first used.
func New(cfg Config, d Deps) *Link { return &Link{cfg: cfg, d: d, kick: make(chan struct{}, 1)} }

// Changed asks for a checkpoint soon (a limit or member changed).
func (p *Link) Changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// get returns the open store, opening it if needed.
func (p *Link) get(ctx context.Context) (*pgstore.Store, error) {
	p.mu.Lock()
	s := p.store
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := pgstore.Open(ctx, pgstore.Config{
		URL:     p.cfg.URL,
		Schema:  p.cfg.Schema,
		Cluster: p.cfg.Cluster,
		Logger:  p.d.Log.With("component", "postgres"),
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

// note records the outcome of a call and logs what it found whenever that
// changes, the first outcome included: a node whose Postgres was never
// reachable, or whose database does not exist, said nothing of it (the
// second it called reachable).
func (p *Link) note(err error) {
	now := reachUp
	switch {
	case err == nil, errors.Is(err, pgstore.ErrFenced), errors.Is(err, pgstore.ErrNotInPool),
		errors.Is(err, pgstore.ErrLimitExceeded), errors.Is(err, pgstore.ErrInvalid), errors.Is(err, pgstore.ErrClosed):
	case errors.Is(err, pgstore.ErrUnavailable):
		now = reachDown
	default:
		now = reachRefused
	}
	p.mu.Lock()
	changed := now != p.state
	p.state = now
	p.mu.Unlock()
	if !changed {
		return
	}
	switch now {
	case reachUp:
		p.d.Log.Info("postgres reachable")
	case reachDown:
		p.d.Log.Warn("postgres unreachable; retrying (no checkpoint, discovery or pooled fallback meanwhile)", "err", err)
	case reachRefused:
		p.d.Log.Error("postgres refuses this node's statements; check --postgres (its database, user, password and privileges); retrying", "err", err)
	}
}

// Reachable reports whether the last call reached Postgres and was served.
func (p *Link) Reachable() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == reachUp
}

// Close closes the store, if open.
func (p *Link) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store != nil {
		p.store.Close()
		p.store = nil
	}
}

// DiscoverJoin returns gossip addresses published in Postgres in the last
// minute, other than this node's.
func (p *Link) DiscoverJoin(ctx context.Context) []string {
	s, err := p.get(ctx)
	if err != nil {
		return nil
	}
	addrs, err := s.DiscoverGossip(ctx, time.Minute)
	p.note(err)
	var out []string
	for _, a := range addrs {
		if a != p.d.GossipAddr() {
			out = append(out, a)
		}
	}
	return out
}

// JoinPool registers member id's fraction in the pool for Config.PoolTTL.
func (p *Link) JoinPool(ctx context.Context, id string, fraction float64) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	err = s.JoinPool(ctx, id, fraction, p.cfg.PoolTTL)
	p.note(err)
	return err
}

// LeavePoolBusy leaves the pool and returns how far the pool's cursors
// reach past the answer (see pgstore.Store.LeavePool).
func (p *Link) LeavePoolBusy(ctx context.Context, id string) (time.Duration, error) {
	s, err := p.get(ctx)
	if err != nil {
		return 0, err
	}
	busy, err := s.LeavePool(ctx, id)
	p.note(err)
	return busy, err
}

// ReservePooled reserves every want on the pool's cursors at one instant
// (pgstore.ReservePooledAll).
func (p *Link) ReservePooled(ctx context.Context, wants []pgstore.PoolWant, maxWait time.Duration) (time.Duration, error) {
	s, err := p.get(ctx)
	if err != nil {
		return 0, err
	}
	wait, err := s.ReservePooledAll(ctx, p.cfg.NodeID, wants, maxWait)
	p.note(err)
	return wait, err
}

// Heartbeat tells the witness this node is alive and returns whether a
// leader fenced it.
func (p *Link) Heartbeat(ctx context.Context, id string) (bool, error) {
	s, err := p.get(ctx)
	if err != nil {
		return false, err
	}
	fenced, err := s.Witness(ctx, id)
	p.note(err)
	return fenced, err
}

// Fence asks the witness to fence member id if Postgres has not heard from
// it for stale; see pgstore.Store.Fence.
func (p *Link) Fence(ctx context.Context, id string, stale, licence time.Duration) (pgstore.FenceResult, error) {
	s, err := p.get(ctx)
	if err != nil {
		return pgstore.FenceResult{}, err
	}
	res, err := s.Fence(ctx, id, stale, licence)
	p.note(err)
	return res, err
}

// Unfence lifts the fence on member id.
func (p *Link) Unfence(ctx context.Context, id string) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	err = s.Unfence(ctx, id)
	p.note(err)
	return err
}
