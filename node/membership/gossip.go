package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/raftpace/raftpace/internal/logging"
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
	ml     *memberlist.Memberlist
	advert string // our gossip address, fixed at creation
	log    *slog.Logger
	self   meta // Addr and Expect; Bootstrapped lives under mu
	// rejoined is told of every member that joins gossip (a new
	// incarnation).
	rejoined func(id string)

	mu           sync.Mutex
	bootstrapped bool
	members      map[string]Member
	// departed holds ids removed from raft at their own request whose
	// gossip still says alive: reconcile must not add them back. An id
	// leaves the set when gossip reports it left or dead (so a later
	// rejoin is honoured).
	departed map[string]bool
	kick     chan struct{}
	// failed holds ids the leader removed from raft as failed: one is added
	// back only once its address answers (passesCheck), however gossip
	// sees it.
	failed map[string]bool
}

// Member is one member as gossip sees it.
type Member struct {
	Addr   string // its raft and RPC address, from its metadata
	Gossip string // its gossip address
	Alive  bool   // false once gossip reported it left or failed
	Seen   time.Time

	expect       int
	bootstrapped bool
}

func newGossip(cfg Config, addr string, hasState bool, rejoined func(string)) (*gossip, error) {
	g := &gossip{
		log:      cfg.Logger,
		self:     meta{Addr: addr, Expect: cfg.BootstrapExpect},
		rejoined: rejoined,
		members:  make(map[string]Member), departed: make(map[string]bool), failed: make(map[string]bool), kick: make(chan struct{}, 1),
	}
	g.bootstrapped = hasState
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeID
	host, port := cfg.BindHost, cfg.BindPort
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", port
	if cfg.Advertise {
		mc.AdvertiseAddr, mc.AdvertisePort = cfg.AdvertiseHost, cfg.AdvertisePort
	}
	// The label is checked on every packet: another cluster's gossip is
	// dropped, not merged.
	mc.Label = cfg.ClusterName
	// With a key every packet and stream is encrypted and authenticated
	// (AES-GCM, the label as associated data), and unencrypted ones are
	// refused: a node without the key can neither join nor be heard.
	if cfg.SecretKey != nil {
		mc.SecretKey = cfg.SecretKey
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Delegate = g
	mc.Events = g
	mc.Logger = log.New(&gossipKeyHint{w: logging.StdLogger(cfg.Logger.With("component", "memberlist")).Writer()}, "", 0)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		bt, err := newBoundTransport(ip, port, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("node: gossip: %w", err)
		}
		mc.Transport = bt
		if port == 0 {
			port = bt.GetAutoBindPort()
			mc.BindPort = port
			if !cfg.Advertise {
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

// KeyHint is added to every gossip error that comes from nodes not
// sharing one gossip key: memberlist only says that it could not decrypt,
// or that one side encrypts and the other does not.
const KeyHint = "gossip key mismatch? every node of a cluster needs the same gossip key (GossipKeyFile, --gossip-key-file), or none"

// keyMismatch reports whether a memberlist error is about encryption.
func keyMismatch(err error) bool {
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
	if keyMismatch(errors.New(line)) {
		if _, err := h.w.Write([]byte(line + " (" + KeyHint + ")\n")); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return h.w.Write(p)
}

// SplitHostPort splits a gossip address into its host and numeric port.
func SplitHostPort(hp string) (string, int, error) {
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
	m := meta{Addr: g.self.Addr, Expect: g.self.Expect, Bootstrapped: g.bootstrapped}
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
			g.log.Warn("ignoring gossip member with unreadable metadata", "member", node.Name, "err", err)
			return
		}
	}
	if joined {
		// A new incarnation: whatever the leader released for the old one
		// (it left, or was fenced) must not remove the new one again.
		g.rejoined(node.Name)
	}
	g.mu.Lock()
	if !alive || joined {
		delete(g.departed, node.Name)
	}
	g.members[node.Name] = Member{
		Addr:         m.Addr,
		Gossip:       net.JoinHostPort(node.Addr.String(), strconv.Itoa(int(node.Port))),
		Alive:        alive,
		Seen:         time.Now(),
		expect:       m.Expect,
		bootstrapped: m.Bootstrapped,
	}
	g.mu.Unlock()
	g.log.Debug("gossip member", "member", node.Name, "health", Health(alive), "addr", m.Addr)
	g.kickNow()
}

// markDeparted tombstones id, removed from raft at its own request, while
// gossip still says it is alive (a member that announced its leave in
// gossip first needs none: nothing re-adds a member gossip calls gone).
func (g *gossip) markDeparted(id string) {
	g.mu.Lock()
	if m, ok := g.members[id]; ok && m.Alive {
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

func (g *gossip) clearFailed(id string) {
	g.mu.Lock()
	delete(g.failed, id)
	g.mu.Unlock()
}

func (g *gossip) isFailed(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed[id]
}

func (g *gossip) isDeparted(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.departed[id]
}

func (g *gossip) snapshot() map[string]Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]Member, len(g.members))
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
			g.log.Debug("gossip meta update", "err", err)
		}
	}
}

// Health names a member's gossip state for status: alive, or failed (left
// or unreachable).
func Health(alive bool) string {
	if alive {
		return "alive"
	}
	return "failed"
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
