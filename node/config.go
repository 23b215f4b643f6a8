package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/membership"
	"github.com/raftpace/raftpace/node/pglink"
	"github.com/raftpace/raftpace/transport"
)

// maxClusterName is memberlist's limit on a packet label (LabelMaxSize).
const maxClusterName = 255

// Config configures a Node. A zero field takes its default (DefaultConfig
// lists them); New fills the defaults and refuses what Validate refuses.
// Nothing in it can be changed after the node is built.
type Config struct {
	// NodeID names this node in the cluster: unique, stable across restarts
	// (it is the raft server ID). Same rules as fsm.ValidateID.
	NodeID string
	// DataDir holds the raft log, stable store and snapshots. Required.
	DataDir string
	// BindAddr is the one TCP address (host:port) carrying raft and raftpace
	// RPC. Port 0 picks a free port (tests).
	BindAddr string
	// AdvertiseAddr is the address other nodes dial; default: the bound address.
	AdvertiseAddr string
	// GossipBindAddr is memberlist's TCP+UDP address (host:port). Port 0 picks a free port.
	GossipBindAddr string
	// GossipAdvertiseAddr is the gossip address others use; default: the bound one.
	GossipAdvertiseAddr string
	// ClusterName is carried in every gossip packet (memberlist's label):
	// nodes of another cluster are not heard. Default "raftpace".
	ClusterName string
	// BootstrapExpect forms a new cluster once this many nodes that were
	// started with the same value see each other, and none of them holds raft
	// state or knows a leader. 0 means never bootstrap (join an existing
	// cluster); 1 is a single-node cluster.
	BootstrapExpect int
	// Join lists gossip addresses of nodes to contact at start (retried
	// until one answers or the node closes).
	Join []string
	// Voters is the number of raft voters the leader keeps (default 3, 1 to 5);
	// further nodes join as nonvoters and are promoted when a voter leaves.
	Voters int
	// Timing holds raft's timers; the zero value means LANTiming().
	Timing Timing
	// HorizonAhead is how far ahead of need the leader commits each key's
	// horizon (default 1s). A new leader starts each key past the inherited
	// horizon: up to HorizonAhead after the last slot the old leader
	// granted (which may itself lie ahead, callers using it meanwhile).
	HorizonAhead time.Duration
	// UseGrace is the longest a granted slot may be used after the time the
	// leader meant it for. A forwarded grant is placed on this host's clock
	// from when the request was sent (the earliest the leader can have meant
	// it), so a grant whose round trip ate the grace arrives forfeit, and a
	// waiter woken later than the grace forfeits its slot and asks again.
	// Forfeited slots are never reused, so the ceiling's delta term is
	// exactly UseGrace: at most R*W + B + R*UseGrace events in any window W.
	// Default 50ms (scheduling delay on a loaded host dominates; the
	// network part on one LAN is well under a millisecond).
	UseGrace time.Duration
	// DisableLeases makes every reservation a request to the leader (a
	// forwarded RPC on followers) instead of serving single events from
	// leased runs of slots. For comparison and debugging.
	DisableLeases bool
	// LeaseSpan is the most time one lease covers at the key's full rate
	// (default 20ms). Longer spans mean fewer requests to the leader at
	// high rates; a lease whose first slot is more than a span away holds
	// one slot, so low rates are paced slot by slot. Must be less than
	// HorizonAhead/2.
	LeaseSpan time.Duration
	// ShareTTL is how long a member's promise to the leader lasts: the
	// leader renews every member's share every ShareTTL/3; a member not
	// renewed for ShareTTL paces its callers itself at its fallback
	// fraction (default 2s).
	ShareTTL time.Duration
	// FallbackFor is how long a member may pace in fallback before it
	// stops admitting (default 60s). The leader reaps a member not heard
	// from for ShareTTL + FallbackFor + ReapMargin, so a reaped member has
	// always stopped spending its fraction.
	FallbackFor time.Duration
	// ReapMargin is the leader's extra wait before reaping (default 10s).
	// Without Postgres only: with PostgresURL a silent member's fraction
	// comes back through the witness instead (WitnessTTL).
	ReapMargin time.Duration
	// FailedServerAfter is how long a member may leave the leader's share
	// renewals unanswered before the leader removes it from the raft
	// configuration (default ShareTTL + 1s), so dead voters never hold the
	// quorum hostage: a crashed worker that never comes back is replaced by
	// a healthy nonvoter within seconds. Removal from raft is not the
	// return of its fallback fraction: that follows the rules of
	// node/DESIGN.md ("Membership churn"). A removed member that turns out
	// to be alive is added again once it answers.
	FailedServerAfter time.Duration
	// WitnessTTL applies with PostgresURL, where Postgres is the witness of
	// every member's fallback (DESIGN 9): a member heartbeats to Postgres
	// every WitnessTTL/3; cut off from its leader it may pace locally only
	// until WitnessTTL after the last heartbeat Postgres accepted (pooled
	// through Postgres, it paces as long as the cut lasts), and the leader
	// takes a silent member's fraction back once Postgres has not heard
	// from it for 2/3 WitnessTTL, after fencing it there, WitnessTTL after
	// its last heartbeat at most. Default 3s: a dead member's fraction
	// returns about ShareTTL + 1s after its death; a member that reaches
	// neither its leader nor Postgres stops after at most WitnessTTL.
	WitnessTTL time.Duration
	// MaxSlotTTL is the longest a concurrency slot may be held (default
	// 30s): AcquireSlots refuses a longer ttl. It also sets when a member in
	// fallback may start granting slots from its fraction of a cap: only
	// once every slot the leader granted before the member's share lapsed
	// has surely expired, i.e. MaxSlotTTL into fallback (DESIGN 5 for
	// slots; node/DESIGN.md).
	MaxSlotTTL time.Duration
	// PostgresURL, when set, links the node to Postgres (DESIGN 6): the
	// leader checkpoints limits, members and horizons there; a cluster
	// started with empty data dirs restores them; nodes publish their
	// addresses (a node without Join finds the cluster there); members in
	// fallback that reach it pool their fractions on one cursor. Postgres
	// being down is logged and survived.
	PostgresURL string
	// PostgresSchema holds raftpace's tables (default "raftpace"; created
	// on first use).
	PostgresSchema string
	// CheckpointEvery is how often the leader writes the checkpoint
	// (default 5s); it also writes soon after every limit or member change.
	CheckpointEvery time.Duration
	// Logger receives the node's logs, raft's and memberlist's included.
	// Default: discard.
	Logger *slog.Logger

	// TLSCAFile, TLSCertFile and TLSKeyFile (PEM) turn on mutual TLS 1.3
	// for raft and RPC between nodes: the cluster CA's certificate, this
	// node's certificate (signed by that CA, extended key usages serverAuth
	// and clientAuth) and its private key. All three or none. Any
	// certificate the CA signed is a member (transport.TLSConfig): keep the
	// CA's key offline. Every node of a cluster must agree; a node without
	// TLS cannot talk to one with it, and the leader adds to raft only a
	// member whose address passes the TLS check. `raftpace tls init` and
	// `raftpace tls node NAME` write these files.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// GossipKeyFile names a file holding the key that encrypts and
	// authenticates gossip (memberlist's SecretKey, AES-GCM): the base64 of
	// 16, 24 or 32 random bytes (`raftpace tls init` writes 32). Every node
	// needs the same key; a node with another key, or none, cannot join and
	// the log of both sides says "gossip key mismatch?". Default: gossip in
	// the clear.
	GossipKeyFile string

	// Unsafe turns protections off. Each one breaks the ceiling on
	// purpose; they exist so that tests can show their checks fail without
	// the protection. Never set them in production.
	Unsafe Unsafe
}

// Unsafe lists the protections that tests may turn off.
type Unsafe struct {
	// FreshStart: a new leader starts every key at now instead of at the
	// horizon it inherited, and every quota's count at 0 instead of the
	// committed one, so it may grant slots the old leader granted.
	FreshStart bool
	// SpendExpired: leased slots are served even after their use-by has
	// passed (a follower that was paused spends stale slots at once).
	SpendExpired bool
	// FallbackFullRate: a node in fallback paces at the key's full rate
	// instead of its fraction (what "each worker paces itself" does).
	FallbackFullRate bool
	// RestoreLimitsOnly: a cluster restored from the Postgres checkpoint
	// gets its limits but not its horizons, so it may grant slots the old
	// cluster granted.
	RestoreLimitsOnly bool
	// ReclaimWithoutFence: the leader takes a silent member's fraction back
	// after ShareTTL + 1s without fencing it through the witness, so a
	// member cut off from raft but pooling through Postgres spends its
	// fraction twice.
	ReclaimWithoutFence bool
}

// Timing holds the raft timers. See hashicorp/raft's Config for their
// meaning; LeaderLeaseTimeout must not exceed HeartbeatTimeout.
type Timing struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
}

// LANTiming suits nodes on one LAN on loaded machines: a failed leader is
// replaced in about 1-2 s; its lease is raft's longest (node/DESIGN.md).
func LANTiming() Timing {
	return Timing{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
	}
}

// FastTiming is for in-process tests on loopback.
func FastTiming() Timing {
	return Timing{
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
}

const (
	defaultVoters       = 3
	maxVoters           = 5
	defaultHorizonAhead = time.Second
	defaultUseGrace     = 50 * time.Millisecond
	defaultLeaseSpan    = 20 * time.Millisecond
	defaultShareTTL     = 2 * time.Second
	defaultFallbackFor  = 60 * time.Second
	defaultReapMargin   = 10 * time.Second
	defaultMaxSlotTTL   = 30 * time.Second
	defaultWitnessTTL   = 3 * time.Second
)

// DefaultConfig returns a Config with every default filled in: what New
// uses for each field left zero. Its FailedServerAfter is the default
// ShareTTL + 1s (New derives it from the ShareTTL it is given). NodeID,
// DataDir, BindAddr and GossipBindAddr have no default: set them before
// Validate or New accepts the Config.
func DefaultConfig() Config { return Config{}.withDefaults() }

// withDefaults returns a copy of c with zero fields set to their defaults.
// New calls it, then Validate.
func (c Config) withDefaults() Config {
	orDefault(&c.ClusterName, "raftpace")
	orDefault(&c.Voters, defaultVoters)
	orDefault(&c.Timing, LANTiming())
	orDefault(&c.HorizonAhead, defaultHorizonAhead)
	orDefault(&c.UseGrace, defaultUseGrace)
	orDefault(&c.LeaseSpan, defaultLeaseSpan)
	orDefault(&c.ShareTTL, defaultShareTTL)
	orDefault(&c.FallbackFor, defaultFallbackFor)
	orDefault(&c.ReapMargin, defaultReapMargin)
	orDefault(&c.MaxSlotTTL, defaultMaxSlotTTL)
	orDefault(&c.FailedServerAfter, c.ShareTTL+time.Second) // after ShareTTL's default
	orDefault(&c.WitnessTTL, defaultWitnessTTL)
	orDefault(&c.CheckpointEvery, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// orDefault sets *field to def when it is its type's zero value.
func orDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Validate reports every problem of c at once, each wrapping
// ErrInvalidConfig and naming the field (as spelt in Config), its value and
// the rule; the problems are joined (errors.Join), one a line. It checks c
// as given: a zero field that New would fill with its default is checked
// as zero, so start from DefaultConfig. It reads the TLS and gossip key
// files to check them. New fills the defaults, then refuses what Validate
// refuses; nil means New will not refuse c as invalid (it may still fail
// to bind its ports or open its data dir).
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s %q: %s", ErrInvalidConfig, field, fmt.Sprint(value), rule))
	}
	if err := fsm.ValidateID(c.NodeID); err != nil {
		errs = append(errs, fmt.Errorf("%w: NodeID: %w", ErrInvalidConfig, err))
	}
	if c.DataDir == "" {
		bad("DataDir", c.DataDir, "required")
	}
	checkHostPort := func(field, v string, required bool) {
		if v == "" {
			if required {
				bad(field, v, "required (host:port)")
			}
			return
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			bad(field, v, "must be host:port")
			return
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			bad(field, v, "port must be 0-65535")
		}
		if host == "" && (field == "AdvertiseAddr" || field == "GossipAdvertiseAddr") {
			bad(field, v, "must name a host")
		}
		if host != "" && field == "GossipAdvertiseAddr" && net.ParseIP(host) == nil {
			bad(field, v, "host must be an IP address (gossip does not resolve names)")
		}
	}
	checkHostPort("BindAddr", c.BindAddr, true)
	checkHostPort("AdvertiseAddr", c.AdvertiseAddr, false)
	checkHostPort("GossipBindAddr", c.GossipBindAddr, true)
	checkHostPort("GossipAdvertiseAddr", c.GossipAdvertiseAddr, false)
	for _, j := range c.Join {
		checkHostPort("Join", j, true)
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 64 {
		bad("BootstrapExpect", c.BootstrapExpect, "must be 0-64")
	}
	if c.Voters < 1 || c.Voters > maxVoters {
		bad("Voters", c.Voters, fmt.Sprintf("must be 1-%d", maxVoters))
	}
	t := c.Timing
	if t.HeartbeatTimeout < 5*time.Millisecond || t.ElectionTimeout < 5*time.Millisecond {
		bad("Timing", fmt.Sprintf("%+v", t), "heartbeat and election timeouts must be at least 5ms")
	}
	if t.LeaderLeaseTimeout < 5*time.Millisecond || t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		bad("Timing.LeaderLeaseTimeout", t.LeaderLeaseTimeout, "must be 5ms..HeartbeatTimeout")
	}
	if t.CommitTimeout < time.Millisecond {
		bad("Timing.CommitTimeout", t.CommitTimeout, "must be at least 1ms")
	}
	// within reports whether d lies in lo..hi and reports field if not. A
	// rule relative to another field is checked only when that field is
	// valid: one mistake is reported once, not again as the cause of another.
	within := func(field string, d, lo, hi time.Duration, rule string) bool {
		if d < lo || d > hi {
			bad(field, d, rule)
			return false
		}
		return true
	}
	horizonOK := within("HorizonAhead", c.HorizonAhead, 10*time.Millisecond, time.Minute, "must be 10ms..1m")
	graceOK := within("UseGrace", c.UseGrace, time.Millisecond, 10*time.Second, "must be 1ms..10s")
	ttlOK := within("ShareTTL", c.ShareTTL, 30*time.Millisecond, 10*time.Minute, "must be 30ms..10m")
	within("FallbackFor", c.FallbackFor, 0, 24*time.Hour, "must be 0..24h")
	if c.PostgresURL != "" && graceOK && c.ReapMargin < poolTTL+poolMaxWait+c.UseGrace+time.Second {
		bad("ReapMargin", c.ReapMargin, fmt.Sprintf("with PostgresURL must be at least %v: the pool may spend a member's fraction that long after it stops", poolTTL+poolMaxWait+c.UseGrace+time.Second))
	}
	if (ttlOK && c.FailedServerAfter < c.ShareTTL/2) || c.FailedServerAfter > time.Hour {
		bad("FailedServerAfter", c.FailedServerAfter, "must be ShareTTL/2..1h (renewals go out every ShareTTL/3)")
	}
	within("WitnessTTL", c.WitnessTTL, 300*time.Millisecond, 10*time.Minute, "must be 300ms..10m")
	if c.CheckpointEvery < 100*time.Millisecond {
		bad("CheckpointEvery", c.CheckpointEvery, "must be at least 100ms")
	}
	if c.ReapMargin < time.Second {
		bad("ReapMargin", c.ReapMargin, "must be at least 1s")
	}
	within("MaxSlotTTL", c.MaxSlotTTL, 10*time.Millisecond, fsm.MaxSlotTTL, fmt.Sprintf("must be 10ms..%v", fsm.MaxSlotTTL))
	if c.LeaseSpan < time.Millisecond || (horizonOK && c.LeaseSpan*2 >= c.HorizonAhead) {
		bad("LeaseSpan", c.LeaseSpan, "must be at least 1ms and less than HorizonAhead/2")
	}
	if _, err := c.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.gossipKey(); err != nil {
		errs = append(errs, err)
	}
	if len(c.ClusterName) > maxClusterName {
		bad("ClusterName", c.ClusterName, fmt.Sprintf("must be at most %d bytes (it labels every gossip packet)", maxClusterName))
	}
	if c.PostgresURL != "" {
		// The URL may hold a password: name the field, never the value.
		if msg := pglink.URLProblem(c.PostgresURL); msg != "" {
			errs = append(errs, fmt.Errorf("%w: PostgresURL: cannot parse: %s", ErrInvalidConfig, msg))
		}
	}
	return errors.Join(errs...)
}

// tlsConfig loads the TLS files: nil without TLS. Its errors are config
// errors naming the fields and files.
func (c Config) tlsConfig() (*transport.TLSConfig, error) {
	given := map[string]string{"TLSCAFile": c.TLSCAFile, "TLSCertFile": c.TLSCertFile, "TLSKeyFile": c.TLSKeyFile}
	var have, missing []string
	for _, f := range []string{"TLSCAFile", "TLSCertFile", "TLSKeyFile"} {
		if given[f] != "" {
			have = append(have, f)
		} else {
			missing = append(missing, f)
		}
	}
	switch {
	case len(have) == 0:
		return nil, nil
	case len(missing) > 0:
		return nil, fmt.Errorf("%w: TLSCAFile, TLSCertFile and TLSKeyFile must be given together (%s given, %s missing)",
			ErrInvalidConfig, strings.Join(have, ", "), strings.Join(missing, ", "))
	}
	tc, err := transport.LoadTLSConfig(c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	return tc, nil
}

// gossipKey reads GossipKeyFile: nil without one.
func (c Config) gossipKey() ([]byte, error) {
	key, err := membership.ReadKeyFile(c.GossipKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return key, nil
}

// reapAfter is how long the leader waits without hearing from a member
// before removing it: longer than the member's promise plus its fallback.
func (c Config) reapAfter() time.Duration { return c.ShareTTL + c.FallbackFor + c.ReapMargin }

// witnessed reports whether Postgres is every member's fallback witness
// (DESIGN 9): then a silent member's fraction comes back by fencing it
// there, never by waiting reapAfter.
func (c Config) witnessed() bool { return c.PostgresURL != "" }

// fenceStale is how long Postgres must not have heard from a member before
// the leader may fence it: one missed heartbeat (they go out every
// WitnessTTL/3) plus the time one takes.
func (c Config) fenceStale() time.Duration { return 2 * c.WitnessTTL / 3 }
