package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/datadir"
	"github.com/raftpace/raftpace/node/apply"
	"github.com/raftpace/raftpace/node/batch"
	"github.com/raftpace/raftpace/node/fallback"
	"github.com/raftpace/raftpace/node/gate"
	"github.com/raftpace/raftpace/node/leadercall"
	"github.com/raftpace/raftpace/node/lease"
	"github.com/raftpace/raftpace/node/pacer"
	"github.com/raftpace/raftpace/node/pglink"
	"github.com/raftpace/raftpace/node/report"
	"github.com/raftpace/raftpace/node/shares"
	"github.com/raftpace/raftpace/node/slots"
	"github.com/raftpace/raftpace/node/tally"
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

	state  *fsm.State
	fsm    *apply.Adapter // the raft.FSM (package node/apply)
	pacer  *pacer.Pacer
	leases *lease.Cache       // the lease cache (package node/lease)
	lc     *leadercall.Caller // the node's path to its leader
	// Lease requests of many keys in one message (package node/batch):
	// the leader's side, and this node's as a member.
	batchServer *batch.Server
	batchClient *batch.Client
	shares      *shares.Shares
	fallback    *fallback.Fallback
	// memberWrites serialises the leader's writers of the replicated member
	// list (balanceFractions here; syncMembers, forgetReleased and
	// departSelf in package membership, which is given this lock).
	// Each reads the list and commits a change computed from it; two
	// interleaved would commit from a stale read (a fraction rebalance
	// read before a member was forgotten put it back, its fraction
	// reserved for good: the rolling-replace churn tests caught it).
	memberWrites sync.Mutex
	// horizonWrites serialises the leader's writers of horizon entries:
	// the extender (one extension from Collect to its commit) and
	// handOver (the exact cursors). The fsm adapter keeps the latest
	// entry of a key, so an extension collected before handOver's StepDown
	// and committed after the cursors would overwrite them, and the
	// successor would start up to HorizonAhead late.
	horizonWrites sync.Mutex
	// fractionIndex is the raft index of the last fraction shrink: growth
	// waits until every member has applied it.
	fractionIndex atomic.Uint64
	pg            *pglink.Link // nil without PostgresURL
	// freshStart: this node started with no raft state (a new cluster, or
	// a node joining one).
	freshStart bool
	trans      *transport.Transport
	raftTrans  *raft.NetworkTransport
	store      *raftboltdb.BoltStore
	raft       *raft.Raft
	gossip     *gossip
	rpc        map[uint8]rpcHandler // handlers(): one table of the RPC methods served

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

	// appliedPauses: key -> local monotonic ns when its applied pause ends,
	// written by the fsm adapter, read by the gate and the checkpoint.
	appliedPauses gate.Deadlines

	// admittedHist counts this node's grants to its callers, grantedHist
	// (while it leads) the slots it granted to the fleet; see history.go.
	admittedHist, grantedHist tally.History

	// Monitoring (metrics.go): outcomes per key, the wait of granted
	// reservations, raft apply latency, leadership transitions.
	keyCounts           *tally.Keys
	waitHist, applyHist *tally.Histogram
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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := datadir.Claim(cfg.DataDir, cfg.NodeID); errors.Is(err, datadir.ErrOtherNode) {
		return nil, fmt.Errorf("node: %w: DataDir: %w", ErrInvalidConfig, err)
	} else if err != nil {
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
		keyCounts: tally.NewKeys(report.MaxCountedKeys, report.OtherKeys),
		waitHist:  tally.NewHistogram(WaitBuckets),
		applyHist: tally.NewHistogram(ApplyBuckets),
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
	n.lc = n.newLeaderCall()
	n.fsm = apply.New(n.state, n.now, &n.appliedPauses)
	n.pacer = pacer.New(n.now, cfg.HorizonAhead, cfg.LeaseSpan, n.fsm.Horizon, n.state.Limit)
	n.pacer.Granted = func(key string, count int) { n.grantedHist.Add(n.state.LimitKey(key), count, time.Now()) }
	n.leases = n.newLeases()
	n.batchServer, n.batchClient = n.newBatch()
	n.shares = shares.New(n.now, cfg.ShareTTL)
	n.pacer.Shares = n.shares
	n.pacer.Quotas, n.pacer.StoredQuotas = n.state.QuotaCount, n.state.QuotaCounts
	n.fallback = n.newFallback()
	n.gate = n.newGate()
	n.slots = n.newSlots()
	n.fsm.OnMembers = func() { n.shares.SetMembers(n.state.Members()) }
	n.fsm.OnLimit = n.pacer.LimitChanged
	if cfg.PostgresURL != "" {
		n.pg = n.newPGLink()
		n.fsm.OnMembers = func() { n.shares.SetMembers(n.state.Members()); n.pg.Changed() }
		n.fsm.OnLimit = func(key string) { n.pacer.LimitChanged(key); n.pg.Changed() }
		n.fsm.OnGate = n.pg.Changed
	}
	n.pacer.Fresh = cfg.Unsafe.FreshStart
	if cfg.Unsafe != (Unsafe{}) {
		n.log.Warn("UNSAFE test options set: this node may break the ceiling", "options", fmt.Sprintf("%+v", cfg.Unsafe))
	}
	n.fsm.OnReset = n.pacer.Reset

	tlsCfg, err := cfg.tlsConfig() // validated above; nil without TLS
	if err != nil {
		return err
	}
	n.rpc = n.handlers()
	n.trans, err = transport.New(transport.Config{
		BindAddr:      cfg.BindAddr,
		AdvertiseAddr: cfg.AdvertiseAddr,
		TLS:           tlsCfg,
		Logger:        n.log.With("component", "transport"),
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.startRaft(); err != nil {
		return err
	}
	n.trans.Serve(n.handleRPC) // only now: the handlers read n.raft
	if err := n.startGossip(); err != nil {
		return err
	}
	n.gossip.Start()
	n.wg.Add(6)
	go func() { defer n.wg.Done(); n.pacer.FollowShares(n.ctx) }()
	go n.maintainLoop()
	go n.extendLoop()
	go n.shareLoop()
	go func() { defer n.wg.Done(); n.fallback.Watch(n.ctx) }()
	go func() { defer n.wg.Done(); n.batchClient.Run(n.ctx, &n.wg) }()
	if n.pg != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.fallback.HeartbeatLoop(n.ctx) }()
		n.wg.Add(1)
		go n.postgresLoop()
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
			n.pg.Close()
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

// sleepCtx sleeps d, or ends early with ctx or the node (nodeCtx).
var sleepCtx = leadercall.Sleep
