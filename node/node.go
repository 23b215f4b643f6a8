package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/logging"
	"github.com/raftpace/raftpace/node/gate"
	"github.com/raftpace/raftpace/node/pacer"
	"github.com/raftpace/raftpace/node/shares"
	"github.com/raftpace/raftpace/node/slots"
	"github.com/raftpace/raftpace/node/wire"
	"github.com/raftpace/raftpace/transport"
)

// Node is one member of a raftpace cluster, embedded in a worker process.
//
// Build it with New; it is ready to serve once the cluster has a leader
// (WaitForLeader). Reserve, SetLimit and the reads work the same on every
// node: a follower forwards to the leader. All methods are safe for
// concurrent use. Close (or Leave) ends it.
type Node struct {
	cfg   Config
	log   *slog.Logger
	epoch time.Time

	state    *fsm.State
	fsm      *fsmAdapter
	pacer    *pacer.Pacer
	leases   *leaseCache
	shares   *shares.Shares
	fallback *fallback
	// memberWrites serialises the leader's writers of the replicated member
	// list (balanceFractions here; syncMembers, forgetReleased and
	// departSelf in package membership, which is given this lock).
	// Each reads the list and commits a change computed from it; two
	// interleaved would commit from a stale read (a fraction rebalance
	// read before a member was forgotten put it back, its fraction
	// reserved for good: the rolling-replace churn tests caught it).
	memberWrites sync.Mutex
	// fractionIndex is the raft index of the last fraction shrink: growth
	// waits until every member has applied it.
	fractionIndex atomic.Uint64
	pg            *pgLink // nil without PostgresURL
	// freshStart: this node started with no raft state (a new cluster, or
	// a node joining one). restorePending: it leads a new cluster whose
	// state must first be restored from the checkpoint.
	freshStart     bool
	restorePending atomic.Bool
	trans          *transport.Transport
	raftTrans      *raft.NetworkTransport
	store          *raftboltdb.BoltStore
	raft           *raft.Raft
	gossip         *gossip

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
	// departing: Leave has begun; the node admits nothing.
	departing atomic.Bool

	stats counters

	pauseMu sync.Mutex   // leader: serialises pauses (the atomic maximum)
	gate    *gate.Gate   // the refusal gate (package node/gate)
	slots   *slots.Slots // the concurrency caps (package node/slots)

	// admittedHist counts this node's grants to its callers, grantedHist
	// (while it leads) the slots it granted to the fleet; see history.go.
	admittedHist, grantedHist history

	// Monitoring (metrics.go): outcomes per key, the wait of granted
	// reservations, raft apply latency, leadership transitions.
	keyCounts           keyOutcomes
	waitHist, applyHist *histogram
	leaderTransitions   atomic.Uint64
}

type counters struct {
	granted, refused, unknown, forwarded, lateGrants, forfeited, extensions, extendErrors atomic.Uint64
	leases, leasedSlots, fallbackGrants                                                   atomic.Uint64
	pauses, pausedRefusals, slotsAcquired, slotsRefused, slotsReleased, slotsExpired      atomic.Uint64
}

// New validates cfg, opens the data dir and starts the node: transport,
// raft, gossip and the leader's pacer. It does not wait for a leader.
//
// Every failure is an error naming what was wrong (a Config problem wraps
// ErrInvalidConfig); whatever New had opened by then (ports, the raft
// store, goroutines) is released before it returns, so a New that failed
// can be retried on the same addresses and data dir.
func New(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("node: DataDir: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.NodeID),
		epoch:     time.Now(),
		state:     fsm.New(),
		ctx:       ctx,
		cancel:    cancel,
		waitHist:  newHistogram(WaitBuckets),
		applyHist: newHistogram(ApplyBuckets),
	}
	if err := n.start(); err != nil {
		// n is partly built: Close copes with every part still nil.
		if cerr := n.Close(); cerr != nil {
			n.log.Warn("releasing a node that failed to start", "err", cerr)
		}
		return nil, err
	}
	n.log.Info("node started", "addr", n.Addr(), "gossip", n.GossipAddr(), "bootstrap_expect", cfg.BootstrapExpect)
	return n, nil
}

// start builds and starts the parts of n in order. On an error the parts
// started so far stay in n for Close to release.
func (n *Node) start() error {
	cfg := n.cfg
	n.fsm = newFSMAdapter(n.state, n.now)
	n.pacer = pacer.New(n.now, cfg.HorizonAhead, cfg.LeaseSpan, n.fsm.horizon, n.state.Limits)
	n.pacer.Granted = func(key string, count int) { n.grantedHist.add(key, count, time.Now()) }
	n.leases = newLeaseCache(n)
	n.shares = shares.New(n.now, cfg.ShareTTL)
	n.pacer.Shares = n.shares
	n.fallback = newFallback(n)
	n.gate = n.newGate()
	n.slots = n.newSlots()
	n.fsm.onMembers = func() { n.shares.SetMembers(n.state.Members()) }
	n.fsm.onLimit = n.pacer.SetLimit
	if cfg.PostgresURL != "" {
		n.pg = newPGLink(n)
		n.fsm.onMembers = func() { n.shares.SetMembers(n.state.Members()); n.pg.changed() }
		n.fsm.onLimit = func(key string, lim fsm.Limit, ok bool) { n.pacer.SetLimit(key, lim, ok); n.pg.changed() }
		n.fsm.onGate = n.pg.changed
	}
	n.pacer.Fresh = cfg.Unsafe.FreshStart
	if cfg.Unsafe != (Unsafe{}) {
		n.log.Warn("UNSAFE test options set: this node may break the ceiling", "options", fmt.Sprintf("%+v", cfg.Unsafe))
	}
	n.fsm.onReset = n.pacer.Reset

	tlsCfg, err := cfg.tlsConfig() // validated above; nil without TLS
	if err != nil {
		return err
	}
	n.trans, err = transport.New(transport.Config{
		BindAddr:      cfg.BindAddr,
		AdvertiseAddr: cfg.AdvertiseAddr,
		Handler:       n.handleRPC,
		TLS:           tlsCfg,
		Logger:        n.log.With("component", "transport"),
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.startRaft(); err != nil {
		return err
	}
	if err := n.startGossip(); err != nil {
		return err
	}
	n.gossip.Start()
	n.wg.Add(4)
	go n.maintainLoop()
	go n.extendLoop()
	go n.shareLoop()
	go func() { defer n.wg.Done(); n.fallback.watch(n.ctx) }()
	if n.pg != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.fallback.heartbeatLoop(n.ctx) }()
		n.wg.Add(1)
		go n.postgresLoop()
	}
	return nil
}

// storeOpenTimeout bounds the wait for the raft store's file lock: another
// process (or node) running on the same DataDir holds it for as long as it
// runs, so waiting longer would only hang the start.
const storeOpenTimeout = time.Second

func (n *Node) startRaft() error {
	cfg := n.cfg
	hlog := logging.HCLog(n.log, "raft")
	path := filepath.Join(cfg.DataDir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: storeOpenTimeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("node: raft store %s: locked by another process for %v (is another node running on DataDir %q?): %w", path, storeOpenTimeout, cfg.DataDir, err)
	}
	if err != nil {
		return fmt.Errorf("node: raft store: %w", err)
	}
	n.store = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("node: snapshot store: %w", err)
	}
	n.raftTrans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.trans.StreamLayer(),
		MaxPool: 3,
		Timeout: 5 * time.Second,
		Logger:  hlog,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	// Horizon entries arrive a few times a second; snapshot often enough
	// that a restart replays little.
	rc.SnapshotThreshold = 2048
	rc.TrailingLogs = 1024
	rc.Logger = hlog
	notify := make(chan bool, 16)
	rc.NotifyCh = notify
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("node: %w: raft: %w", ErrInvalidConfig, err)
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return fmt.Errorf("node: log cache: %w", err)
	}
	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fmt.Errorf("node: raft state: %w", err)
	}
	n.freshStart = !hasState
	r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, n.raftTrans)
	if err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	n.raft = r
	n.wg.Add(1)
	go n.leadershipLoop(notify)
	if !hasState && cfg.BootstrapExpect == 1 {
		boot := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(n.Addr()),
		}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("node: bootstrap: %w", err)
		}
	}
	return nil
}

// Close stops the node without leaving the cluster (the others see it fail
// and, if it led, elect another leader). It is idempotent and returns when
// every goroutine the node started has ended.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		var errs []error
		if n.pacer != nil {
			n.pacer.StepDown()
		}
		if n.raft != nil {
			if err := n.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
		}
		n.wg.Wait()
		if n.gossip != nil {
			if err := n.gossip.Close(); err != nil {
				errs = append(errs, fmt.Errorf("gossip shutdown: %w", err))
			}
		}
		if n.raftTrans != nil {
			n.raftTrans.Close()
		}
		if n.trans != nil {
			if err := n.trans.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if n.pg != nil {
			n.pg.close()
		}
		if n.store != nil {
			if err := n.store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("raft store: %w", err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			n.closeErr = fmt.Errorf("node: close: %w", err)
		}
		n.log.Info("node closed")
	})
	return n.closeErr
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Addr returns the address of the node's raft and RPC port.
func (n *Node) Addr() string { return n.trans.Addr().String() }

// GossipAddr returns the node's gossip address, the one to pass to Join.
func (n *Node) GossipAddr() string {
	if n.gossip == nil {
		return ""
	}
	return n.gossip.GossipAddr()
}

// now is the node's monotonic clock in nanoseconds since it started.
func (n *Node) now() int64 { return int64(time.Since(n.epoch)) }

func (n *Node) closed() bool { return n.ctx.Err() != nil }

// leadershipLoop follows raft's leadership notifications. On gaining
// leadership the pacer waits for raft's barrier (every earlier entry
// applied, so every inherited horizon is known) before it grants.
func (n *Node) leadershipLoop(notify <-chan bool) {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case leader := <-notify:
			n.leaderTransitions.Add(1)
			gen := n.pacer.StepDown()
			n.shares.StepDown()
			if !leader {
				n.log.Info("lost leadership")
				continue
			}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.becomeLeader(gen)
			}()
		}
	}
}

// becomeLeader starts granting as leader for pacer generation gen: after
// raft's barrier (every earlier entry applied, so every inherited horizon
// is known), the restore of a fresh cluster, and one round of share
// renewals (a new leader holds nothing until members answer).
func (n *Node) becomeLeader(gen uint64) {
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		n.log.Warn("barrier after election failed; not granting", "err", err)
		return
	}
	if !n.restoreBeforeLeading(gen) {
		return
	}
	n.shares.Lead(n.state.Members())
	n.renewShares()
	if n.pacer.Lead(gen) {
		n.log.Info("leading: granting from inherited horizons", "term", n.raft.CurrentTerm())
	}
}

// extendLoop commits horizon extensions while this node leads. It is the
// only writer of horizon entries, so entries never race each other.
func (n *Node) extendLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(max(n.cfg.HorizonAhead/4, 5*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.pacer.Kicks():
		}
		for {
			ext, ok := n.pacer.Collect()
			if !ok {
				break
			}
			if _, err := n.commit(&ext.Cmd, 5*time.Second); err != nil {
				n.stats.extendErrors.Add(1)
				n.log.Warn("horizon extension not committed", "keys", len(ext.Cmd.Entries), "err", err)
				break
			}
			n.stats.extensions.Add(1)
			n.pacer.Committed(ext)
		}
	}
}

// commit encodes c, commits it through raft on this node (the leader) and
// returns its log index. Not leading: ErrNotLeader. Raft failing to commit
// (a timeout, a shutdown): wire.ErrRetry. The state refusing the command:
// ErrInvalidRequest. The one place raft's errors are translated.
func (n *Node) commit(c fsm.Command, timeout time.Duration) (uint64, error) {
	data, err := fsm.Encode(c)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	begin := time.Now()
	f := n.raft.Apply(data, timeout)
	err = f.Error()
	n.applyHist.observe(time.Since(begin))
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, wire.ErrNotLeader
		}
		return 0, fmt.Errorf("%w: raft apply: %w", wire.ErrRetry, err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	return f.Index(), nil
}

// Reserve asks for count events of key. If the wait would exceed maxWait it
// consumes nothing and returns a *LimitExceededError. It works on any node.
// Single events are served from the node's leases (runs of slots the leader
// granted ahead of need, see leases.go) unless DisableLeases is set; larger
// counts, and every request with leases disabled, go to the leader one by
// one (forwarded by a follower), retried within maxWait when a grant
// arrives too late to be used within UseGrace.
func (n *Node) Reserve(ctx context.Context, key string, count int, maxWait time.Duration) (r raftpace.Reservation, err error) {
	if err := fsm.ValidateKey(key); err != nil {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if count < 1 {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: count %d must be at least 1", key, raftpace.ErrInvalidRequest, count)
	}
	if maxWait < 0 {
		maxWait = 0
	}
	begin := time.Now()
	deadline := begin.Add(maxWait)
	defer func() { n.reserved(key, count, begin, r, err) }()
	for {
		if n.closed() {
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		if n.departing.Load() {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w (leaving the cluster)", key, raftpace.ErrClosed)
		}
		if err := n.gate.Wait(ctx, key, max(0, time.Until(deadline))); err != nil {
			return raftpace.Reservation{}, err
		}
		if n.fallback.current() != ModeRaft {
			r, err := n.fallback.reserve(key, count, time.Until(deadline))
			switch {
			case errors.Is(err, errPoolPending):
				if err := sleepCtx(ctx, n.ctx, 20*time.Millisecond); err != nil {
					return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w", key, err)
				}
				continue
			case !errors.Is(err, wire.ErrNotLeader):
				if err == nil {
					n.stats.fallbackGrants.Add(1)
				}
				return r, err
			}
		}
		r, err := n.reserveRaft(ctx, key, count, max(0, time.Until(deadline)))
		if errors.Is(err, errModeChanged) || errors.Is(err, errLeaderPaused) {
			continue // dispatch again; the gate now holds the pause
		}
		return r, err
	}
}

// errModeChanged: while retrying the leader, the node moved to fallback;
// Reserve dispatches again.
var errModeChanged = errors.New("node: admission mode changed")

// inFallback reports whether the node should stop retrying the leader and
// serve its callers from its own fallback.
func (n *Node) inFallback() bool {
	return n.fallback.current() != ModeRaft && n.ownFraction() > 0
}

// reserveRaft serves a reservation through the leader: from the node's
// leases, or one request per reservation.
func (n *Node) reserveRaft(ctx context.Context, key string, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	if count == 1 && !n.cfg.DisableLeases {
		return n.leases.reserve(ctx, key, maxWait)
	}
	begin := time.Now()
	backoff := time.Millisecond
	var lastErr error
	for {
		if n.closed() {
			return raftpace.Reservation{}, raftpace.ErrClosed
		}
		remaining := maxWait - time.Since(begin)
		if remaining < 0 {
			// Retries (no leader, leader change, late grants) used up the
			// caller's maximum wait: say why, not "limit exceeded".
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w within max wait %v: %w", key, raftpace.ErrNoLeader, maxWait, lastErr)
		}
		sent := time.Now()
		wait, held, err := n.pacer.Reserve(ctx, n.ctx.Done(), key, count, remaining)
		if errors.Is(err, wire.ErrNotLeader) {
			sent = time.Now()
			wait, held, err = n.forwardReserve(ctx, key, count, remaining)
		}
		if err == nil {
			// The leader meant the slot for (its grant time + wait), and its
			// grant time is at least held after sent; here it can only be
			// placed from arrival, so it may be up to the network's part of
			// the round trip late.
			arrived := time.Now()
			held = min(held, arrived.Sub(sent))
			r := raftpace.Reservation{At: arrived.Add(wait), UseBy: sent.Add(held + wait + n.cfg.UseGrace)}
			if !r.UseBy.Before(r.At) {
				return r, nil
			}
			n.stats.lateGrants.Add(1)
			n.log.Warn("grant arrived too late to use; asking again", "key", key, "round_trip", arrived.Sub(sent), "use_grace", n.cfg.UseGrace)
			lastErr = fmt.Errorf("grant arrived after %v, past its use-by", arrived.Sub(sent))
			continue
		}
		if !retryable(err) {
			return raftpace.Reservation{}, err
		}
		if n.inFallback() {
			return raftpace.Reservation{}, errModeChanged
		}
		lastErr = err
		n.log.Debug("reserve: retrying", "key", key, "err", err)
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrNoLeader, err)
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// Forfeit records that a caller dropped a reservation it could not use by
// its UseBy (for the node's counters).
func (n *Node) Forfeit(raftpace.Reservation) { n.stats.forfeited.Add(1) }

// leaderCallTimeout bounds one request to the leader: its own maximum
// wait (the leader may hold it that long for a horizon) plus a little.
// Past it the leader is presumed paused or cut off and looked up again.
func leaderCallTimeout(maxWait time.Duration) time.Duration {
	return min(maxWait, time.Second) + 500*time.Millisecond
}

func retryable(err error) bool {
	return errors.Is(err, wire.ErrRetry) || errors.Is(err, wire.ErrNotLeader) || errors.Is(err, pacer.ErrNoShare)
}

func (n *Node) forwardReserve(ctx context.Context, key string, count int, maxWait time.Duration) (wait, held time.Duration, err error) {
	addr, _ := n.raft.LeaderWithID()
	if addr == "" || string(addr) == n.Addr() {
		// No leader, or this node won but has not passed its barrier yet.
		return 0, 0, wire.ErrRetry
	}
	n.stats.forwarded.Add(1)
	cctx, cancel := context.WithTimeout(ctx, leaderCallTimeout(maxWait))
	defer cancel()
	raw, err := n.trans.Call(cctx, string(addr), wire.MethodReserve, wire.ReserveReq{Key: key, Count: count, MaxWait: maxWait}.Encode())
	if err != nil {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("node: reserve %q: %w", key, ctx.Err())
		}
		return 0, 0, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	resp, err := wire.DecodeReserveResp(raw)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, addr, err)
	}
	if resp.Code == wire.CodeLimitExceeded {
		return 0, 0, &raftpace.LimitExceededError{Key: key, Wait: resp.Wait, MaxWait: maxWait}
	}
	if resp.Code == wire.CodePaused {
		return 0, 0, n.leaderPaused(key, resp.Wait)
	}
	if err := wire.ErrFor(resp.Code, resp.Msg); err != nil {
		if errors.Is(err, wire.ErrNotLeader) {
			return 0, 0, err
		}
		if resp.Code == wire.CodeUnavailable {
			return 0, 0, fmt.Errorf("%w: %w", wire.ErrRetry, err)
		}
		return 0, 0, fmt.Errorf("node: reserve %q: %w", key, err)
	}
	return resp.Wait, resp.Held, nil
}

// SetLimit commits the limit for key. When it returns, reads of the limit on
// this node reflect it.
func (n *Node) SetLimit(ctx context.Context, key string, lim fsm.Limit) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: set limit: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("node: set limit %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
	}
	what := fmt.Sprintf("set limit %q", key)
	return n.commitOnLeader(ctx, what, wire.MethodSetLimit, wire.SetLimitReq{Key: key, Limit: lim}.Encode(),
		func() (uint64, error) { return n.applyLimit(key, lim) })
}

func (n *Node) applyLimit(key string, lim fsm.Limit) (uint64, error) {
	index, err := n.commit(&fsm.SetLimit{Key: key, Limit: lim}, 5*time.Second)
	if err != nil && !errors.Is(err, wire.ErrNotLeader) {
		return 0, fmt.Errorf("node: set limit %q: %w", key, err)
	}
	return index, err
}

// waitApplied returns once this node's state has applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	for {
		ch := n.fsm.appliedCh()
		if n.state.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("node: waiting for index %d: %w", index, ctx.Err())
		case <-n.ctx.Done():
			return raftpace.ErrClosed
		}
	}
}

// Limit returns the limit set for key, as this node has applied it.
func (n *Node) Limit(ctx context.Context, key string) (fsm.Limit, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return fsm.Limit{}, fmt.Errorf("node: limit: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Limit{}, err
	}
	lim, ok := n.state.Limit(key)
	if !ok {
		return fsm.Limit{}, fmt.Errorf("node: limit %q: %w", key, raftpace.ErrUnknownKey)
	}
	return lim, nil
}

// Limits returns every limit, as this node has applied them.
func (n *Node) Limits(ctx context.Context) (map[string]fsm.Limit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.state.Limits(), nil
}

// WaitForLeader blocks until the cluster has a leader that grants (this
// node's view), and returns its id.
func (n *Node) WaitForLeader(ctx context.Context) (string, error) {
	for {
		addr, id := n.raft.LeaderWithID()
		if addr != "" && (string(id) != n.cfg.NodeID || n.pacer.IsLeading()) {
			return string(id), nil
		}
		if err := sleepCtx(ctx, n.ctx, 10*time.Millisecond); err != nil {
			return "", fmt.Errorf("node: %w: %w", raftpace.ErrNoLeader, err)
		}
	}
}

// IsLeader reports whether this node is the leader and granting.
func (n *Node) IsLeader() bool { return n.pacer.IsLeading() }

func sleepCtx(ctx, nodeCtx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-nodeCtx.Done():
		return raftpace.ErrClosed
	}
}

// handleRPC serves the transport's RPCs from other nodes.
func (n *Node) handleRPC(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	switch method {
	case wire.MethodReserve:
		m, err := wire.DecodeReserveReq(req)
		if err != nil {
			return wire.ReserveResp{Code: wire.CodeInvalid, Msg: err.Error()}.Encode(), nil
		}
		if err := fsm.ValidateKey(m.Key); err != nil {
			return wire.ReserveResp{Code: wire.CodeInvalid, Msg: err.Error()}.Encode(), nil
		}
		// The caller's deadline does not travel with the request: bound the
		// wait for a horizon by the caller's own maximum, so the leader does
		// not grant a slot long after the follower gave up on it.
		// A node that has not applied a pause yet (one just restarted, or
		// lagging) must not be granted a paused key.
		if p := n.PausedFor(m.Key); p > 0 {
			return wire.ReserveResp{Code: wire.CodePaused, Wait: p}.Encode(), nil
		}
		ctx, cancel := context.WithTimeout(ctx, max(m.MaxWait, 0)+time.Second)
		defer cancel()
		wait, held, err := n.pacer.Reserve(ctx, n.ctx.Done(), m.Key, m.Count, m.MaxWait)
		var le *raftpace.LimitExceededError
		if errors.As(err, &le) {
			return wire.ReserveResp{Code: wire.CodeLimitExceeded, Wait: le.Wait, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		return wire.ReserveResp{Code: wire.CodeFor(err), Wait: wait, Held: held, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodLease:
		m, err := wire.DecodeLeaseReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err == nil {
			err = fsm.ValidateID(m.Holder)
		}
		if err != nil {
			return wire.LeaseResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if p := n.PausedFor(m.Key); p > 0 {
			return wire.LeaseResp{Code: wire.CodePaused, Wait: p}.Encode(), nil
		}
		ctx, cancel := context.WithTimeout(ctx, max(m.MaxWait, 0)+time.Second)
		defer cancel()
		l, err := n.pacer.Lease(ctx, n.ctx.Done(), m.Key, m.Holder, m.Count, m.MaxWait)
		var le *raftpace.LimitExceededError
		if errors.As(err, &le) {
			return wire.LeaseResp{Code: wire.CodeLimitExceeded, Wait: le.Wait, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		return wire.LeaseResp{Code: wire.CodeFor(err), Lease: l, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodShare:
		m, err := wire.DecodeShareReq(req)
		if err != nil {
			return nil, err
		}
		// Only the leader this node knows may hold its share.
		if _, id := n.raft.LeaderWithID(); string(id) != m.Leader {
			return nil, fmt.Errorf("node: share renewal from %q, but the leader here is %q", m.Leader, id)
		}
		return n.fallback.renew().Encode(), nil
	case wire.MethodSetLimit:
		m, err := wire.DecodeSetLimitReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err == nil {
			err = m.Limit.Validate()
		}
		if err != nil {
			return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode(), nil
		}
		if n.raft.State() != raft.Leader {
			return wire.IndexResp{Code: wire.CodeNotLeader}.Encode(), nil
		}
		index, err := n.applyLimit(m.Key, m.Limit)
		return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
	case wire.MethodPause, wire.MethodAcquireSlots, wire.MethodReleaseSlots, wire.MethodSetCap, wire.MethodSync:
		return n.handleGateRPC(ctx, method, req)
	case wire.MethodRemoveServer:
		m, err := wire.DecodeRemoveServerReq(req)
		if err != nil {
			return wire.IndexResp{Code: wire.CodeInvalid, Msg: err.Error()}.Encode(), nil
		}
		index, err := n.departed(m)
		return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode(), nil
	default:
		n.log.Warn("unknown rpc method", "method", method)
		return nil, fmt.Errorf("node: unknown rpc method %d", method)
	}
}
