package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/logging"
	"github.com/raftpace/raftpace/node/wire"
)

// meta is what a node gossips about itself.
type meta struct {
	Addr         string `json:"a"`           // raft + RPC address
	Expect       int    `json:"e,omitempty"` // its BootstrapExpect
	Bootstrapped bool   `json:"b,omitempty"` // it holds raft state or knows a leader
}

// gossip wraps memberlist: discovery and failure detection. Gossip carries
// only addresses and flags; limits and horizons travel through raft.
type gossip struct {
	n      *Node
	ml     *memberlist.Memberlist
	advert string // our gossip address, fixed at creation

	mu           sync.Mutex
	bootstrapped bool
	members      map[string]gossipMember
	// departed holds ids removed from raft at their own request whose
	// gossip still says alive: reconcile must not add them back. An id
	// leaves the set when gossip reports it left or dead (so a later
	// rejoin is honoured).
	departed map[string]bool
	kick     chan struct{}
	// lastRejoin is when rejoinFailed last ran (reconcile goroutine only).
	lastRejoin time.Time
	// tlsChecks remembers the members whose raft address failed the
	// leader's connection check, so it is not retried on every reconcile
	// (reconcile goroutine only).
	tlsChecks map[string]tlsCheck
	// failed holds ids the leader removed from raft as failed: one is added
	// back only once its address answers (passesCheck), however gossip
	// sees it.
	failed map[string]bool
}

// tlsCheck is the last failed TLS check of a member.
type tlsCheck struct {
	addr      string
	err       string
	retryAt   time.Time
	loggedAt  time.Time
	succeeded bool
}

type gossipMember struct {
	meta   meta
	gossip string
	alive  bool // false once gossip reported it left or failed
	seen   time.Time
}

func newGossip(n *Node) (*gossip, error) {
	g := &gossip{n: n, members: make(map[string]gossipMember), departed: make(map[string]bool), failed: make(map[string]bool), kick: make(chan struct{}, 1)}
	hasState := n.raft.LastIndex() > 0
	g.bootstrapped = hasState
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.NodeID
	host, port, err := splitHostPort(n.cfg.GossipBindAddr)
	if err != nil {
		return nil, fmt.Errorf("node: %w: GossipBindAddr: %w", ErrInvalidConfig, err)
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", port
	if n.cfg.GossipAdvertiseAddr != "" {
		h, p, err := splitHostPort(n.cfg.GossipAdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("node: %w: GossipAdvertiseAddr: %w", ErrInvalidConfig, err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = h, p
	}
	// The label is checked on every packet: another cluster's gossip is
	// dropped, not merged.
	mc.Label = n.cfg.ClusterName
	// With a key every packet and stream is encrypted and authenticated
	// (AES-GCM, the label as associated data), and unencrypted ones are
	// refused: a node without the key can neither join nor be heard.
	key, err := n.cfg.gossipKey()
	if err != nil {
		return nil, err
	}
	if key != nil {
		mc.SecretKey = key
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Delegate = g
	mc.Events = g
	mc.Logger = log.New(&gossipKeyHint{w: logging.StdLogger(n.log.With("component", "memberlist")).Writer()}, "", 0)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		bt, err := newBoundTransport(ip, port, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("node: gossip: %w", err)
		}
		mc.Transport = bt
		if port == 0 {
			port = bt.GetAutoBindPort()
			mc.BindPort = port
			if n.cfg.GossipAdvertiseAddr == "" {
				mc.AdvertisePort = port
			}
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("node: gossip: %w", err)
	}
	g.ml = ml
	// LocalNode's fields change under memberlist's lock when our metadata
	// is updated, and LocalNode does not take it: read the address once.
	ln := ml.LocalNode()
	g.advert = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	return g, nil
}

// gossipKeyHintText is added to every gossip error that comes from nodes
// not sharing one gossip key: memberlist only says that it could not
// decrypt, or that one side encrypts and the other does not.
const gossipKeyHintText = "gossip key mismatch? every node of a cluster needs the same gossip key (GossipKeyFile, --gossip-key-file), or none"

// gossipKeyMismatch reports whether a memberlist error is about encryption.
func gossipKeyMismatch(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "decrypt") || strings.Contains(s, "encrypt")
}

// gossipKeyHint passes memberlist's log lines on, adding the key hint to
// those about encryption.
type gossipKeyHint struct{ w io.Writer }

func (h *gossipKeyHint) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	if gossipKeyMismatch(errors.New(line)) {
		if _, err := h.w.Write([]byte(line + " (" + gossipKeyHintText + ")\n")); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return h.w.Write(p)
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

func (g *gossip) addr() string { return g.advert }

func (g *gossip) kickNow() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// NodeMeta implements memberlist.Delegate.
func (g *gossip) NodeMeta(limit int) []byte {
	g.mu.Lock()
	m := meta{Addr: g.n.Addr(), Expect: g.n.cfg.BootstrapExpect, Bootstrapped: g.bootstrapped}
	g.mu.Unlock()
	b, _ := json.Marshal(m)
	if len(b) > limit {
		return nil
	}
	return b
}

func (g *gossip) NotifyMsg([]byte)                           {}
func (g *gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *gossip) LocalState(join bool) []byte                { return nil }
func (g *gossip) MergeRemoteState(buf []byte, join bool)     {}

// NotifyJoin, NotifyLeave and NotifyUpdate implement memberlist.EventDelegate.
// The node's State field is not to be trusted here: memberlist (v0.5.4)
// keeps the live state in its own nodeState and hands out the embedded Node,
// whose State it never updates. The event itself says what happened.
func (g *gossip) NotifyJoin(node *memberlist.Node)   { g.observe(node, true, true) }
func (g *gossip) NotifyLeave(node *memberlist.Node)  { g.observe(node, false, false) }
func (g *gossip) NotifyUpdate(node *memberlist.Node) { g.observe(node, true, false) }

// observe records a member's gossip state. A join (a new incarnation, such
// as a node restarted after it left) ends its departed tombstone, as does
// its leave: the tombstone only guards the time between the leader removing
// it from raft and gossip hearing that it left.
func (g *gossip) observe(node *memberlist.Node, alive, joined bool) {
	var m meta
	if len(node.Meta) > 0 {
		if err := json.Unmarshal(node.Meta, &m); err != nil {
			g.n.log.Warn("ignoring gossip member with unreadable metadata", "member", node.Name, "err", err)
			return
		}
	}
	if joined {
		// A new incarnation: whatever the leader released for the old one
		// (it left, or was fenced) must not remove the new one again.
		g.n.shares.Rejoined(node.Name)
	}
	g.mu.Lock()
	if !alive || joined {
		delete(g.departed, node.Name)
	}
	g.members[node.Name] = gossipMember{
		meta:   m,
		gossip: net.JoinHostPort(node.Addr.String(), strconv.Itoa(int(node.Port))),
		alive:  alive,
		seen:   time.Now(),
	}
	g.mu.Unlock()
	g.n.log.Debug("gossip member", "member", node.Name, "health", health(alive), "addr", m.Addr)
	g.kickNow()
}

// markDeparted tombstones id, removed from raft at its own request, while
// gossip still says it is alive (a member that announced its leave in
// gossip first needs none: nothing re-adds a member gossip calls gone).
func (g *gossip) markDeparted(id string) {
	g.mu.Lock()
	if m, ok := g.members[id]; ok && m.alive {
		g.departed[id] = true
	}
	g.mu.Unlock()
}

// markFailed records that the leader removed id from raft as failed.
func (g *gossip) markFailed(id string) {
	g.mu.Lock()
	g.failed[id] = true
	g.mu.Unlock()
}

func (g *gossip) isDeparted(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.departed[id]
}

func (g *gossip) snapshot() map[string]gossipMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]gossipMember, len(g.members))
	for k, v := range g.members {
		out[k] = v
	}
	return out
}

// markBootstrapped records that this node belongs to a formed cluster and
// tells the others, so none of them bootstraps a second one.
func (g *gossip) markBootstrapped() {
	g.mu.Lock()
	changed := !g.bootstrapped
	g.bootstrapped = true
	g.mu.Unlock()
	if changed {
		if err := g.ml.UpdateNode(time.Second); err != nil {
			g.n.log.Debug("gossip meta update", "err", err)
		}
	}
}

// health names a member's gossip state for status: alive, or failed (left
// or unreachable).
func health(alive bool) string {
	if alive {
		return "alive"
	}
	return "failed"
}

// joinLoop contacts the configured gossip addresses until one answers.
func (n *Node) joinLoop(addrs []string) {
	defer n.wg.Done()
	backoff := 100 * time.Millisecond
	fromConfig := len(addrs) > 0
	for {
		if !fromConfig {
			// No --join: find the cluster through the addresses members
			// publish in Postgres (until this node knows a leader).
			if leaderKnown(n.raft) {
				return
			}
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			addrs = n.discoverJoin(ctx)
			cancel()
			if len(addrs) == 0 {
				if sleepCtx(context.Background(), n.ctx, backoff) != nil {
					return
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
		}
		count, err := n.gossip.ml.Join(addrs)
		if count > 0 {
			n.log.Info("joined gossip", "contacted", count)
			return
		}
		if gossipKeyMismatch(err) {
			n.log.Error("join refused: "+gossipKeyHintText+"; retrying", "addrs", addrs, "err", err, "in", backoff)
		} else {
			n.log.Warn("join: no gossip address answered; retrying", "addrs", addrs, "err", err, "in", backoff)
		}
		if sleepCtx(context.Background(), n.ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// bootstrapLoop forms the cluster once BootstrapExpect nodes that expect the
// same number see each other and none of them has state or a leader. Every
// node computes the same configuration (the expected number of lowest ids),
// so whichever bootstraps first, they agree.
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	expect := n.cfg.BootstrapExpect
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.gossip.kick:
		}
		if n.raft.LastIndex() > 0 || leaderKnown(n.raft) {
			n.gossip.markBootstrapped()
			return
		}
		var ids []string
		members := n.gossip.snapshot()
		other := false
		for id, m := range members {
			if !m.alive {
				continue
			}
			if m.meta.Bootstrapped && id != n.cfg.NodeID {
				other = true
			}
			if m.meta.Expect == expect && m.meta.Addr != "" {
				ids = append(ids, id)
			}
		}
		if other {
			// A formed cluster exists: wait to be added by its leader.
			n.log.Info("a formed cluster is in gossip; waiting to be added instead of bootstrapping")
			n.gossip.markBootstrapped()
			return
		}
		if len(ids) < expect {
			continue
		}
		sort.Strings(ids)
		ids = ids[:expect]
		var servers []raft.Server
		self := false
		for i, id := range ids {
			suffrage := raft.Voter
			if i >= n.cfg.Voters {
				suffrage = raft.Nonvoter
			}
			servers = append(servers, raft.Server{Suffrage: suffrage, ID: raft.ServerID(id), Address: raft.ServerAddress(members[id].meta.Addr)})
			self = self || id == n.cfg.NodeID
		}
		if !self {
			n.log.Info("enough nodes to bootstrap, this one not among the first; waiting to be added", "ids", ids)
			n.gossip.markBootstrapped()
			return
		}
		err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.log.Error("bootstrap failed", "err", err)
			continue
		}
		n.log.Info("bootstrapped cluster", "servers", ids)
		n.gossip.markBootstrapped()
		return
	}
}

func leaderKnown(r *raft.Raft) bool {
	addr, _ := r.LeaderWithID()
	return addr != ""
}

// reconcileLoop runs on the leader: it makes raft's configuration follow
// gossip. A live node missing from raft is added (as a voter while there are
// fewer than Voters, else as a nonvoter); a nonvoter is promoted when voters
// are missing. A node that leaves gracefully removes itself (Leave); a node
// that fails without leaving stays a member (it may come back).
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.gossip.kick:
		}
		if leaderKnown(n.raft) {
			n.gossip.markBootstrapped()
		}
		n.rejoinFailed()
		if !n.pacer.IsLeading() {
			continue
		}
		if err := n.reconcile(); err != nil {
			n.log.Warn("reconcile membership", "err", err)
		}
	}
}

// rejoinFailed contacts, every few seconds, raft members that gossip
// reports failed: after a partition heals memberlist would otherwise only
// notice at its next full state sync (30s), and status would show healthy
// members as failed until then.
func (n *Node) rejoinFailed() {
	if time.Since(n.gossip.lastRejoin) < 3*time.Second {
		return
	}
	n.gossip.lastRejoin = time.Now()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	members := n.gossip.snapshot()
	var addrs []string
	for _, s := range f.Configuration().Servers {
		if m, ok := members[string(s.ID)]; ok && !m.alive && m.gossip != "" && string(s.ID) != n.cfg.NodeID {
			addrs = append(addrs, m.gossip)
		}
	}
	if len(addrs) == 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if count, err := n.gossip.ml.Join(addrs); count > 0 {
			n.log.Info("rejoined failed gossip members", "contacted", count)
		} else {
			n.log.Debug("rejoin failed gossip members", "addrs", addrs, "err", err)
		}
	}()
}

func (n *Node) reconcile() error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var errs []error
	servers, err := n.removeFailed(f.Configuration().Servers)
	if err != nil {
		errs = append(errs, err)
	}
	inRaft := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, s := range servers {
		inRaft[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	members := n.gossip.snapshot()
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := members[id]
		s, known := inRaft[id]
		switch {
		case m.alive && m.meta.Addr != "" && (!known || string(s.Address) != m.meta.Addr) && !n.gossip.isDeparted(id):
			if !n.passesCheck(id, m.meta.Addr) {
				continue
			}
			n.gossip.mu.Lock()
			delete(n.gossip.failed, id)
			n.gossip.mu.Unlock()
			var err error
			// A new member joins as a nonvoter and is promoted once it has
			// caught up (below): adding an empty voter would make the quorum
			// wait for its catch-up.
			if known && s.Suffrage == raft.Voter {
				n.log.Info("updating voter address", "member", id, "addr", m.meta.Addr)
				err = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.meta.Addr), 0, 5*time.Second).Error()
			} else {
				n.log.Info("adding nonvoter", "member", id, "addr", m.meta.Addr)
				err = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(m.meta.Addr), 0, 5*time.Second).Error()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("add %s: %w", id, err))
			}
		}
	}
	// Promote healthy nonvoters while voters are missing: answering the
	// leader's renewals and caught up with its log.
	applied := n.raft.AppliedIndex()
	for _, s := range servers {
		if voters >= n.cfg.Voters {
			break
		}
		if s.Suffrage != raft.Nonvoter || !n.shares.CaughtUp(string(s.ID), n.cfg.ShareTTL, applied-min(applied, promoteLag)) {
			continue
		}
		n.log.Info("promoting nonvoter to voter", "member", s.ID)
		if err := n.raft.AddVoter(s.ID, s.Address, 0, 5*time.Second).Error(); err != nil {
			errs = append(errs, fmt.Errorf("promote %s: %w", s.ID, err))
		} else {
			voters++
		}
	}
	errs = append(errs, n.syncMembers())
	return errors.Join(errs...)
}

// promoteLag is how many log entries a nonvoter may trail the leader's
// applied index and still be promoted.
const promoteLag = 256

// passesCheck reports whether the leader may add member id at addr to
// raft. Without TLS, always, unless the leader removed id as failed: then
// only once its address answers. With TLS gossip is not enough (a node that
// has the gossip key but no certificate of the cluster CA gossips like
// anyone else): the leader must first open a connection to addr, which
// succeeds only when both ends accept each other's certificate. A failure
// is logged (once per address and error, and at most every 30s) and
// retried after 5s.
func (n *Node) passesCheck(id, addr string) bool {
	g := n.gossip
	g.mu.Lock()
	failed := g.failed[id]
	g.mu.Unlock()
	if !n.cfg.tlsEnabled() && !failed {
		return true
	}
	if g.tlsChecks == nil {
		g.tlsChecks = make(map[string]tlsCheck)
	}
	prev, seen := g.tlsChecks[id]
	now := time.Now()
	if seen && prev.addr == addr && !prev.succeeded && now.Before(prev.retryAt) {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	err := n.trans.Probe(ctx, addr)
	cancel()
	if err == nil {
		if seen && !prev.succeeded {
			n.log.Info("member passed the connection check", "member", id, "addr", addr)
		}
		g.tlsChecks[id] = tlsCheck{addr: addr, succeeded: true}
		return true
	}
	c := tlsCheck{addr: addr, err: err.Error(), retryAt: now.Add(5 * time.Second), loggedAt: prev.loggedAt}
	if !seen || prev.addr != addr || prev.err != c.err || now.Sub(prev.loggedAt) >= 30*time.Second {
		why := "its address does not answer (it was removed as failed)"
		if n.cfg.tlsEnabled() {
			why = "its address failed the TLS check (is its certificate signed by the cluster CA?)"
		}
		n.log.Warn("not adding member to raft: "+why, "member", id, "addr", addr, "err", err)
		c.loggedAt = now
	}
	g.tlsChecks[id] = c
	return false
}

// syncMembers adds every server of raft's configuration to the replicated
// member list (and follows address changes).
func (n *Node) syncMembers() error {
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	want := make(map[string]string)
	for _, s := range f.Configuration().Servers {
		want[string(s.ID)] = string(s.Address)
	}
	have := make(map[string]fsm.Member)
	for _, m := range n.state.Members() {
		have[m.ID] = m
	}
	var errs []error
	for id, addr := range want {
		m, ok := have[id]
		if ok && m.Addr == addr {
			continue
		}
		// A new member starts with fraction 0: balanceFractions grows it
		// once every member has applied the shrinks that make room.
		if _, err := n.commit(&fsm.UpsertMember{Member: fsm.Member{ID: id, Addr: addr, Fraction: m.Fraction}}, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("record member %s: %w", id, err))
		}
	}
	// A member gone from raft stays in the list, its fraction reserved for
	// it, until reclaim releases and forgets it (churn.go).
	return errors.Join(errs...)
}

// removeServer removes id from raft; it runs on the leader.
func (n *Node) removeServer(id string) (uint64, error) {
	if err := fsm.ValidateID(id); err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	if n.raft.State() != raft.Leader {
		return 0, wire.ErrNotLeader
	}
	n.gossip.markDeparted(id)
	f := n.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, wire.ErrNotLeader
		}
		return 0, fmt.Errorf("node: remove %s: %w", id, err)
	}
	return f.Index(), nil
}

// Join asks the node to contact the given gossip addresses; the cluster's
// leader then adds it to raft. It returns how many addresses answered.
func (n *Node) Join(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, fmt.Errorf("node: join: %w: no addresses", raftpace.ErrInvalidRequest)
	}
	for _, a := range addrs {
		if _, _, err := splitHostPort(a); err != nil {
			return 0, fmt.Errorf("node: join: %w: address %q: must be host:port", raftpace.ErrInvalidRequest, a)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	count, err := n.gossip.ml.Join(addrs)
	if count == 0 {
		if gossipKeyMismatch(err) {
			return 0, fmt.Errorf("node: join %v: refused: %s: %w", addrs, gossipKeyHintText, err)
		}
		return 0, fmt.Errorf("node: join %v: no address answered: %w", addrs, err)
	}
	return count, nil
}

// boundTransport is memberlist's network transport with its TCP dials made
// from the gossip bind IP (its UDP already leaves from the bound socket), so
// a node's gossip comes from the address it listens on, like its raft and
// RPC traffic.
type boundTransport struct {
	*memberlist.NetTransport
	local *net.TCPAddr
}

func newBoundTransport(ip net.IP, port int, logger *log.Logger) (*boundTransport, error) {
	cfg := &memberlist.NetTransportConfig{BindAddrs: []string{ip.String()}, BindPort: port, Logger: logger}
	var nt *memberlist.NetTransport
	var err error
	// With port 0, TCP and UDP must get the same free port: memberlist
	// retries a few times for the same reason.
	for try := 0; try < 10; try++ {
		if nt, err = memberlist.NewNetTransport(cfg); err == nil {
			break
		}
		if port != 0 || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return &boundTransport{NetTransport: nt, local: &net.TCPAddr{IP: ip}}, nil
}

func (b *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, LocalAddr: b.local}
	return d.Dial("tcp", a.Addr)
}

func (b *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return b.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}
