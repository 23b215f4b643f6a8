package membership

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// raftChangeTimeout bounds one change of raft's configuration (add,
// promote, remove a server), as node's commit timeout bounds a commit.
const raftChangeTimeout = 5 * time.Second

// Config is what membership reads of the node's configuration; node fills
// it from its own Config, already validated and defaulted.
type Config struct {
	NodeID string
	// Join lists gossip addresses to contact at start.
	Join            []string
	BootstrapExpect int
	Voters          int

	// Gossip's bind and advertise addresses, already split and checked.
	BindHost      string
	BindPort      int
	Advertise     bool // AdvertiseHost and AdvertisePort are set
	AdvertiseHost string
	AdvertisePort int
	ClusterName   string
	SecretKey     []byte // nil: gossip in the clear
	// TLS: raft's connections are mutual TLS, so a new member must pass a
	// connection check before it is added (passesCheck).
	TLS bool

	ShareTTL          time.Duration
	FailedServerAfter time.Duration
	UseGrace          time.Duration
	WitnessTTL        time.Duration
	ReapAfter         time.Duration
	// UnsafeReclaim: Unsafe.ReclaimWithoutFence (reclaim).
	UnsafeReclaim bool
	// NoLeaderNotice is how long the node may know no leader before it
	// logs what it waits for (again every six times as long). node sets
	// twenty election timeouts (10 s with LANTiming): an election takes a
	// few, so one that should have happened has long failed by then.
	NoLeaderNotice time.Duration

	// Logger is the node's own: membership's lines read as the node's.
	Logger *slog.Logger
}

// Shares is the leader's share bookkeeping as membership needs it: who
// answers renewals, who has been silent how long, whose fraction was
// released and from when (times on the node's clock, Deps.Now).
type Shares interface {
	// Rejoined: id joined gossip as a new incarnation; its release ends.
	Rejoined(id string)
	// CaughtUp: id answered within the last within and has applied index.
	CaughtUp(id string, within time.Duration, index uint64) bool
	// Silence: how long id has left renewals unanswered, and whether its
	// share has lapsed.
	Silence(id string) (time.Duration, bool)
	// Overdue lists members other than self, not released, whose share
	// lapsed at least after ago.
	Overdue(self string, after time.Duration) []string
	// Release hands id's fraction to the leader for slots from on.
	Release(id string, from int64)
	// Released lists the members whose release time is at or before now.
	Released(now int64) []string
	IsReleased(id string) bool
}

// FenceResult is the witness's answer to a fence (pgstore.FenceResult).
type FenceResult struct {
	Fenced   bool
	Wait     time.Duration
	LastSeen time.Duration
	Reason   string
}

// Deps is what membership is given instead of the node.
type Deps struct {
	// Raft is the node's raft: membership reads and changes its
	// configuration, bootstraps it and asks who leads.
	Raft *raft.Raft
	// Addr is the node's raft and RPC address, gossiped to the others.
	Addr string
	// Now is the node's monotonic clock, the shares' time base.
	Now func() int64
	// Leading reports whether this node leads and grants (past its
	// barrier): only then does it reconcile and reclaim.
	Leading func() bool
	// Commit commits a command through raft on this node, the leader.
	Commit func(c fsm.Command) (uint64, error) // bounded by node's commit timeout
	// Members is the replicated member list as this node applied it.
	Members func() []fsm.Member
	// MemberWrites serialises every leader writer of the member list
	// (node's fraction balancing too): each reads the list and commits a
	// change computed from it.
	MemberWrites sync.Locker
	Shares       Shares
	// Probe opens a connection to a member's raft address (mutual TLS when
	// configured) and closes it.
	Probe func(ctx context.Context, addr string) error
	// DiscoverJoin returns gossip addresses other members published (in
	// Postgres); nil without Postgres.
	DiscoverJoin func(ctx context.Context) []string
	// Fence fences a member through the witness; nil without one.
	Fence func(ctx context.Context, id string) (FenceResult, error)
}

// Membership is one node's part in the cluster's membership: its gossip
// and, while it leads, the policy that makes raft follow gossip and that
// takes back the fractions of members gone.
type Membership struct {
	cfg    Config
	d      Deps
	log    *slog.Logger
	ctx    context.Context
	wg     sync.WaitGroup
	gossip *gossip

	// lastRejoin is when rejoinFailed last ran (reconcile goroutine only).
	lastRejoin time.Time
	// tlsChecks remembers the members whose raft address failed the
	// leader's connection check, so it is not retried on every reconcile
	// (reconcile goroutine only).
	tlsChecks map[string]tlsCheck
	// addedAt is when reconcile last added each member to raft
	// (reconcile goroutine only): removeFailed leaves a member alone for
	// FailedServerAfter after that, so it has time to answer a renewal.
	addedAt map[string]time.Time
}

// New joins no one yet: it starts this node's gossip (memberlist on its
// port) so that others can find it. ctx is the node's: its end stops every
// goroutine membership starts.
func New(ctx context.Context, cfg Config, d Deps) (*Membership, error) {
	m := &Membership{cfg: cfg, d: d, log: cfg.Logger, ctx: ctx, addedAt: make(map[string]time.Time)}
	g, err := newGossip(cfg, d.Addr, d.Raft.LastIndex() > 0, d.Shares.Rejoined)
	if err != nil {
		return nil, err
	}
	m.gossip = g
	return m, nil
}

// Start starts the loops: reconcile, reclaim and the leaderless notice
// always, join when there is somewhere to join, bootstrap when
// BootstrapExpect asks for it.
func (m *Membership) Start() {
	m.wg.Add(3)
	go m.reconcileLoop()
	go m.reclaimLoop()
	go m.leaderlessLoop()
	if len(m.cfg.Join) > 0 || m.d.DiscoverJoin != nil {
		m.wg.Add(1)
		go m.joinLoop(m.cfg.Join)
	}
	if m.cfg.BootstrapExpect > 1 {
		m.wg.Add(1)
		go m.bootstrapLoop()
	}
}

// Close waits for membership's goroutines (the node's context must have
// ended) and leaves memberlist without a word: the others see a failure.
func (m *Membership) Close() error {
	m.wg.Wait()
	return m.gossip.ml.Shutdown()
}

// GossipAddr is this node's gossip address, the one to pass to Join.
func (m *Membership) GossipAddr() string { return m.gossip.addr() }

// Snapshot is every member gossip has heard of, by id.
func (m *Membership) Snapshot() map[string]Member { return m.gossip.snapshot() }

// Join contacts the given gossip addresses; the cluster's leader then adds
// this node to raft. It returns how many addresses answered.
func (m *Membership) Join(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, fmt.Errorf("node: join: %w: no addresses", raftpace.ErrInvalidRequest)
	}
	for _, a := range addrs {
		if _, _, err := SplitHostPort(a); err != nil {
			return 0, fmt.Errorf("node: join: %w: address %q: must be host:port", raftpace.ErrInvalidRequest, a)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	count, err := m.gossip.ml.Join(addrs)
	if count == 0 {
		if keyMismatch(err) {
			return 0, fmt.Errorf("node: join %v: refused: %s: %w", addrs, KeyHint, err)
		}
		return 0, fmt.Errorf("node: join %v: no address answered: %w", addrs, flatJoinError{err})
	}
	return count, nil
}

// flatJoinError prints memberlist's join error (a go-multierror: "1 error
// occurred:\n\t* ...\n\n") as one line, its errors joined by "; ".
type flatJoinError struct{ err error }

func (e flatJoinError) Error() string {
	many, ok := e.err.(interface{ WrappedErrors() []error })
	if !ok || e.err == nil {
		return fmt.Sprint(e.err)
	}
	var parts []string
	for _, err := range many.WrappedErrors() {
		parts = append(parts, strings.TrimSpace(err.Error()))
	}
	return strings.Join(parts, "; ")
}

func (e flatJoinError) Unwrap() error { return e.err }

// SoleVoter reports whether this node is the only voter of raft's
// configuration (unknown configuration: false).
func (m *Membership) SoleVoter() bool {
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	self := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || string(s.ID) == m.cfg.NodeID
		}
	}
	return self && voters == 1
}

// LeaveGossip announces this node's departure in gossip.
func (m *Membership) LeaveGossip() {
	if err := m.gossip.ml.Leave(2 * time.Second); err != nil {
		m.log.Warn("gossip leave", "err", err)
	}
}

// RejoinGossip undoes LeaveGossip after a leave that failed.
func (m *Membership) RejoinGossip() {
	if _, jerr := m.gossip.ml.Join(m.gossipPeers()); jerr != nil {
		m.log.Warn("rejoining gossip after a failed leave", "err", jerr)
	}
}

// gossipPeers lists the gossip addresses of the other members gossip knows.
func (m *Membership) gossipPeers() []string {
	var out []string
	for id, g := range m.gossip.snapshot() {
		if id != m.cfg.NodeID && g.Gossip != "" {
			out = append(out, g.Gossip)
		}
	}
	return out
}

// sleep waits d unless the node's context ends first (false).
func (m *Membership) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.ctx.Done():
		return false
	}
}
