package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/atomicfile"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/admin"
	"github.com/raftpace/raftpace/node"
)

const agentAbout = `Runs a raftpace node: raft and RPC on --bind, gossip (discovery and failure
detection) on --gossip-bind, and the local admin API (used by status, limit,
join, leave) on --http. Logs go to stderr.

Forming a cluster: start three agents with --bootstrap-expect 3 and
--join pointing at each other's gossip addresses (or at one of them); they
bootstrap once they see each other. A node added later joins with
--bootstrap-expect 0 (the default) and --join. A single node:
--bootstrap-expect 1.

On SIGINT or SIGTERM the agent stops its load and leaves the cluster (it
stops admitting, hands its fallback fraction back, hands leadership over if
it leads, leaves raft and gossip), then exits 0: right for workers that are
replaced with a new id and an empty data dir (a Kubernetes Deployment, an
autoscaled group, systemd units on throwaway hosts). With
--leave-on-terminate=false it stops without leaving instead, for members
that come back under the same --node-id and --data-dir (a StatefulSet with
persistent volumes): the others keep its place (and, without --postgres,
its fallback fraction) until it returns. A second signal exits at once.
'raftpace leave' makes it leave the cluster, then exit.

A member that dies without leaving (SIGKILL, OOM, a lost host) is removed
from raft once it has left the leader's renewals unanswered for
--failed-server-after (healthy nonvoters take dead voters' places); with
--postgres its fallback fraction comes back within about --share-ttl + 1s
(the leader fences it in Postgres first), without Postgres only after
--share-ttl + --fallback-for + --reap-margin (72s by default).

With --ready-file the agent writes, once the node runs and the admin API
listens, a JSON document with the addresses it actually bound:
  {"node_id":..,"addr":..,"gossip_addr":..,"http_addr":..,"pid":..}
(written to a temporary file and renamed; removed at start and at a clean
exit).

Load generation (tests and demos): --load KEY[:CONCURRENCY] runs
CONCURRENCY goroutines (default 1) calling Wait(KEY) in a loop once a
leader is known, and appends each admitted event to --timeline as
"unix_nanos node_id key". They wait (retrying every 100ms) while no limit
is set for KEY. The concurrency is the number after the key's last ':';
write KEY:1 for a key that itself ends in ':NUMBER'.

For benchmarks (raftpace bench): --load-rate R makes the load open-loop
(R arrivals per second per key, shed when the workers cannot keep up or the
wait would pass --load-max-wait), --load-duration stops it, --load-report
writes the latency of each reservation call and the admitted and shed
counts at exit, and --timeline-buffer appends the timeline in batches.`

// agentConfig is the agent's command line.
type agentConfig struct {
	gate                     gateLoadFlags
	nodeID, dataDir          string
	bind, advertise          string
	gossipBind, gossipAdvert string
	bootstrapExpect          int
	join                     listFlag
	httpAddr                 string
	clusterName              string
	voters                   int
	horizonAhead             time.Duration
	raftTiming               string
	logFormat, logLevel      string
	readyFile                string
	loadFlags
	loadMode            string
	noLeases            bool
	leaseSpan, useGrace time.Duration
	unsafeFreshStart    bool
	unsafeSpendExpired  bool
	unsafeFallbackFull  bool
	shareTTL            time.Duration
	postgresURL         string
	postgresSchema      string
	fallbackFor         time.Duration
	reapMargin          time.Duration
	failedServerAfter   time.Duration
	witnessTTL          time.Duration
	leaveOnTerminate    bool
	unsafeReclaim       bool
	agentSecurity
}

// agentSecurity is the agent's TLS, gossip key and admin token flags.
type agentSecurity struct {
	tlsCA, tlsCert, tlsKey string
	gossipKeyFile          string
	httpTokenFile          string
	httpTokenEnv           string // RAFTPACE_HTTP_TOKEN, set by the command before validate
	httpToken              string // the token in force, set by validate
}

const securityAbout = `

Security: --tls-ca, --tls-cert and --tls-key run raft and RPC between
nodes over mutual TLS 1.3 with a cluster CA, and --gossip-key-file
encrypts gossip ('raftpace tls init' and 'raftpace tls node NAME' write
them). Every node of a cluster needs the same CA and gossip key: a node
without them, or with others, cannot join, and both sides log why. With
--http-token-file (or RAFTPACE_HTTP_TOKEN holding the token itself) the
admin API's /v1/ routes require "Authorization: Bearer TOKEN" (operator
commands: --token-file or RAFTPACE_TOKEN); without a token --http must
be a loopback address.`

// register adds the security flags.
func (s *agentSecurity) register(f *flags) {
	f.StringVar(&s.tlsCA, "tls-ca", "", "cluster CA certificate `FILE` (PEM): with --tls-cert and --tls-key, mutual TLS\nbetween nodes; peers must hold a certificate this CA signed")
	f.StringVar(&s.tlsCert, "tls-cert", "", "this node's certificate `FILE` (PEM), signed by --tls-ca")
	f.StringVar(&s.tlsKey, "tls-key", "", "this node's private key `FILE` (PEM)")
	f.StringVar(&s.gossipKeyFile, "gossip-key-file", "", "`FILE` holding the gossip encryption key (base64 of 32 bytes); every node\nneeds the same one")
	f.StringVar(&s.httpTokenFile, "http-token-file", "", "`FILE` holding the bearer token the admin API requires on /v1/ routes;\nrequired when --http is not a loopback address (or set RAFTPACE_HTTP_TOKEN)")
	f.withEnv("tls-ca", "tls-cert", "tls-key", "gossip-key-file", "http-token-file")
}

// validate checks the security flags and reads the admin token.
func (s *agentSecurity) validate(bad func(error), httpOn bool, httpAddr string) {
	var have, missing []string
	for _, fl := range []struct{ name, v string }{{"--tls-ca", s.tlsCA}, {"--tls-cert", s.tlsCert}, {"--tls-key", s.tlsKey}} {
		if fl.v != "" {
			have = append(have, fl.name)
		} else {
			missing = append(missing, fl.name)
		}
	}
	if len(have) > 0 && len(missing) > 0 {
		bad(fmt.Errorf("--tls-ca, --tls-cert and --tls-key go together (%s given, %s missing)",
			strings.Join(have, ", "), strings.Join(missing, ", ")))
	}
	switch {
	case s.httpTokenFile != "" && s.httpTokenEnv != "":
		bad(errors.New("--http-token-file and RAFTPACE_HTTP_TOKEN are both set: use one"))
	case s.httpTokenFile != "":
		tok, err := admin.ReadToken(s.httpTokenFile)
		if err != nil {
			bad(fmt.Errorf("--http-token-file: %w", err))
		}
		s.httpToken = tok
	case s.httpTokenEnv != "":
		tok, err := admin.CheckToken(s.httpTokenEnv, "RAFTPACE_HTTP_TOKEN")
		if err != nil {
			bad(err)
		}
		s.httpToken = tok
	}
	if httpOn && s.httpTokenFile == "" && s.httpTokenEnv == "" {
		if host, _, err := net.SplitHostPort(httpAddr); err == nil && !loopbackHost(host) {
			bad(fmt.Errorf("--http %q on a non-loopback address needs --http-token-file (or RAFTPACE_HTTP_TOKEN): the admin API can change limits and make the node leave", httpAddr))
		}
	}
}

// loopbackHost reports whether host may be a loopback address: a loopback
// IP, "localhost", or a name that is not an IP (checked again on the
// address the listener bound). "" (every interface) is not.
func loopbackHost(host string) bool {
	if host == "" {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	return true
}

func agentFlags() (*flags, *agentConfig) {
	f := newFlags("agent", "--data-dir DIR [flags]", agentAbout)
	a := &agentConfig{join: listFlag{sep: ","}}
	f.StringVar(&a.nodeID, "node-id", "", "this node's `ID`, unique and stable across restarts (default: the host name)")
	f.StringVar(&a.dataDir, "data-dir", "", "`DIR` for the raft log, stable store and snapshots (required)")
	f.StringVar(&a.bind, "bind", "127.0.0.1:7400", "`HOST:PORT` for raft and RPC between nodes (port 0: any free port)")
	f.StringVar(&a.advertise, "advertise", "", "`HOST:PORT` other nodes dial for raft and RPC (default: the bound address)")
	f.StringVar(&a.gossipBind, "gossip-bind", "127.0.0.1:7401", "`HOST:PORT` for gossip, TCP and UDP (port 0: any free port)")
	f.StringVar(&a.gossipAdvert, "gossip-advertise", "", "gossip `HOST:PORT` other nodes use (default: the bound address)")
	f.IntVar(&a.bootstrapExpect, "bootstrap-expect", 0, "form a new cluster once `N` nodes started with the same value see each other;\n0 joins an existing cluster, 1 runs a single-node cluster")
	f.Var(&a.join, "join", "gossip `HOST:PORT[,...]` of cluster members to contact at start (may repeat)")
	f.StringVar(&a.httpAddr, "http", "127.0.0.1:7402", "`HOST:PORT` of the local admin API; \"\" or \"off\" disables it")
	f.StringVar(&a.clusterName, "cluster-name", "raftpace", "`NAME` carried in every gossip packet; nodes of other clusters are not heard")
	f.IntVar(&a.voters, "voters", 3, "number of raft voters the leader keeps (`N`, 1-5); further nodes are nonvoters")
	f.DurationVar(&a.horizonAhead, "horizon-ahead", time.Second, "`DURATION` the leader commits each key's horizon ahead of need;\nalso the longest pause in grants after a leader change")
	f.StringVar(&a.raftTiming, "raft-timing", "lan", "raft `TIMERS`: lan (failover in 1-2s) or fast (loopback tests)")
	f.StringVar(&a.logFormat, "log-format", "text", "log `FORMAT`: text or json")
	f.StringVar(&a.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	f.StringVar(&a.readyFile, "ready-file", "", "write the bound addresses as JSON to `PATH` once ready")
	f.StringVar(&a.loadMode, "load-mode", "raft", "how --load paces, `MODE` raft (ask the cluster: the real thing) or solo:\nTEST/DEMONSTRATION MODE with coordination turned off: each key is paced\nby a local GCRA at its full replicated rate and burst, never asking the\nleader, so N agents admit about N times the rate (shows a ceiling test can fail)")
	f.BoolVar(&a.noLeases, "no-leases", false, "ask the leader for every reservation instead of serving them from leased runs of slots")
	f.DurationVar(&a.leaseSpan, "lease-span", 20*time.Millisecond, "the most time one lease covers at a key's full rate (`DURATION`)")
	f.DurationVar(&a.useGrace, "use-grace", 50*time.Millisecond, "how late after its time a granted slot may still be used (`DURATION`);\nthe delta of the ceiling R*W+B+R*delta")
	f.StringVar(&a.postgresURL, "postgres", "", "PostgreSQL `URL` for the checkpoint, bootstrap of empty data dirs, discovery\n(without --join) and the pooled fallback; optional; never logged")
	f.StringVar(&a.postgresSchema, "postgres-schema", "raftpace", "`SCHEMA` for raftpace's tables in --postgres (created on first use)")
	f.DurationVar(&a.shareTTL, "share-ttl", 2*time.Second, "how long a member's promise to the leader lasts (`DURATION`); a member not\nrenewed for this long paces itself at its fallback fraction")
	f.DurationVar(&a.fallbackFor, "fallback-for", 60*time.Second, "how long a member may pace in fallback before it stops admitting (`DURATION`)")
	f.DurationVar(&a.reapMargin, "reap-margin", 10*time.Second, "the leader reaps a member not heard from for share-ttl + fallback-for + this (`DURATION`)")
	f.BoolVar(&a.leaveOnTerminate, "leave-on-terminate", true, "on SIGTERM/SIGINT leave the cluster before exiting (for members replaced with\nnew ids and empty data dirs); =false stops without leaving, for members that\nrestart with the same --node-id and --data-dir")
	f.DurationVar(&a.failedServerAfter, "failed-server-after", 0, "the leader removes a member from raft after it left renewals unanswered\nthis long (`DURATION`, default share-ttl + 1s); its fraction comes back separately")
	f.DurationVar(&a.witnessTTL, "witness-ttl", 3*time.Second, "with --postgres: a member cut off from its leader and from Postgres paces locally\nat most this long after its last heartbeat (`DURATION`); a dead member's\nfraction returns once Postgres has missed its heartbeats")
	f.BoolVar(&a.unsafeReclaim, "unsafe-reclaim-without-fence", false, "UNSAFE, TESTS ONLY: the leader takes a silent member's fraction back without fencing it in Postgres (breaks the ceiling)")
	f.BoolVar(&a.unsafeFallbackFull, "unsafe-fallback-full-rate", false, "UNSAFE, TESTS ONLY: fallback paces at the full rate, not the node's fraction (breaks the ceiling)")
	f.BoolVar(&a.unsafeFreshStart, "unsafe-fresh-start", false, "UNSAFE, TESTS ONLY: a new leader ignores inherited horizons (breaks the ceiling)")
	f.BoolVar(&a.unsafeSpendExpired, "unsafe-spend-expired", false, "UNSAFE, TESTS ONLY: leased slots are spent after their use-by (breaks the ceiling)")
	f.withEnv("node-id", "data-dir", "bind", "advertise", "gossip-bind", "gossip-advertise", "bootstrap-expect",
		"join", "http", "cluster-name", "voters", "horizon-ahead", "raft-timing", "log-format", "log-level",
		"ready-file", "load-mode", "no-leases", "lease-span", "use-grace",
		"share-ttl", "fallback-for", "reap-margin", "postgres", "postgres-schema",
		"leave-on-terminate", "failed-server-after", "witness-ttl")
	f.env["postgres"] = "RAFTPACE_POSTGRES_URL" // the name operators know from libpq-style setups
	a.agentSecurity.register(f)
	f.about += securityAbout
	a.loadFlags.register(f, true)
	a.gate.register(f)
	return f, a
}

// checkHostPort validates a host:port flag value; port 0 is allowed where
// binding (any free port).
func checkHostPort(flagName, v string, needHost bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("--%s %q: must be HOST:PORT", flagName, v)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--%s %q: port must be a number 0-65535", flagName, v)
	}
	if needHost && (host == "" || p == 0) {
		return fmt.Errorf("--%s %q: must name a host and a non-zero port", flagName, v)
	}
	return nil
}

// configError lists every problem of a configuration.
type configError struct{ problems []string }

func (e *configError) Error() string {
	return "agent: invalid configuration:\n" + strings.Join(e.problems, "\n")
}

// validate checks the command line and returns the node config and the
// load specs. It reports every problem at once.
func (a *agentConfig) validate() (node.Config, []loadgen.Spec, error) {
	var problems []string
	bad := func(err error) { problems = append(problems, err.Error()) }

	if a.nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			bad(fmt.Errorf("--node-id: required (the host name is unavailable: %w)", err))
		}
		a.nodeID = host
	}
	if a.nodeID != "" {
		if err := fsm.ValidateID(a.nodeID); err != nil {
			bad(fmt.Errorf("--node-id: %w", err))
		}
	}
	if strings.TrimSpace(a.dataDir) == "" {
		bad(errors.New("--data-dir: required: the directory for the raft log and snapshots"))
	}
	for _, hp := range []struct {
		name, v  string
		needHost bool
	}{
		{"bind", a.bind, false},
		{"gossip-bind", a.gossipBind, false},
		{"advertise", a.advertise, true},
		{"gossip-advertise", a.gossipAdvert, true},
	} {
		if hp.v == "" {
			if !hp.needHost { // the bind addresses are required
				bad(fmt.Errorf("--%s: required (HOST:PORT)", hp.name))
			}
			continue
		}
		if err := checkHostPort(hp.name, hp.v, hp.needHost); err != nil {
			bad(err)
		}
	}
	for _, j := range a.join.items {
		if err := checkHostPort("join", j, true); err != nil {
			bad(err)
		}
	}
	if a.httpOn() {
		if err := checkHostPort("http", a.httpAddr, false); err != nil {
			bad(fmt.Errorf("%w (or \"off\")", err))
		}
	}
	a.agentSecurity.validate(bad, a.httpOn(), a.httpAddr)
	if a.bootstrapExpect < 0 {
		bad(fmt.Errorf("--bootstrap-expect %d: must be >= 0", a.bootstrapExpect))
	}
	if a.voters < 1 || a.voters > 5 {
		bad(fmt.Errorf("--voters %d: must be 1-5", a.voters))
	}
	if a.horizonAhead <= 0 {
		bad(fmt.Errorf("--horizon-ahead %v: must be positive", a.horizonAhead))
	}
	var timing node.Timing
	switch a.raftTiming {
	case "lan":
		timing = node.LANTiming()
	case "fast":
		timing = node.FastTiming()
	default:
		bad(fmt.Errorf("--raft-timing %q: must be lan or fast", a.raftTiming))
	}
	if a.logFormat != "text" && a.logFormat != "json" {
		bad(fmt.Errorf("--log-format %q: must be text or json", a.logFormat))
	}
	if _, err := parseLevel(a.logLevel); err != nil {
		bad(err)
	}
	specs := a.loadFlags.validate(bad)
	a.gate.validate(bad)
	if a.loadMode != "raft" && a.loadMode != "solo" {
		bad(fmt.Errorf("--load-mode %q: must be raft or solo", a.loadMode))
	}
	if len(problems) > 0 {
		return node.Config{}, nil, &configError{problems: problems}
	}
	return node.Config{
		NodeID:              a.nodeID,
		DataDir:             a.dataDir,
		BindAddr:            a.bind,
		AdvertiseAddr:       a.advertise,
		GossipBindAddr:      a.gossipBind,
		GossipAdvertiseAddr: a.gossipAdvert,
		ClusterName:         a.clusterName,
		BootstrapExpect:     a.bootstrapExpect,
		Join:                a.join.items,
		Voters:              a.voters,
		Timing:              timing,
		HorizonAhead:        a.horizonAhead,
		DisableLeases:       a.noLeases,
		LeaseSpan:           a.leaseSpan,
		UseGrace:            a.useGrace,
		ShareTTL:            a.shareTTL,
		PostgresURL:         a.postgresURL,
		PostgresSchema:      a.postgresSchema,
		FallbackFor:         a.fallbackFor,
		ReapMargin:          a.reapMargin,
		FailedServerAfter:   a.failedServerAfter,
		WitnessTTL:          a.witnessTTL,
		TLSCAFile:           a.tlsCA,
		TLSCertFile:         a.tlsCert,
		TLSKeyFile:          a.tlsKey,
		GossipKeyFile:       a.gossipKeyFile,
		Unsafe: node.Unsafe{
			FreshStart:          a.unsafeFreshStart,
			SpendExpired:        a.unsafeSpendExpired,
			FallbackFullRate:    a.unsafeFallbackFull,
			ReclaimWithoutFence: a.unsafeReclaim,
		},
	}, specs, nil
}

func (a *agentConfig) httpOn() bool { return a.httpAddr != "" && a.httpAddr != "off" }

func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: must be debug, info, warn or error", s)
}

// readyInfo is the --ready-file document.
type readyInfo struct {
	NodeID     string `json:"node_id"`
	Addr       string `json:"addr"`
	GossipAddr string `json:"gossip_addr"`
	HTTPAddr   string `json:"http_addr"`
	PID        int    `json:"pid"`
}

// within reports whether path is dir or lies inside it (lexically).
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// checkWritableDir checks that a file can be created in dir, as the ready
// file will be.
func checkWritableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".raftpace-probe*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the probe's random name says nothing
		}
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// agentNode is the node as the admin API sees it: when the node has left
// (and so closed), the agent is told, and exits.
type agentNode struct {
	*node.Node
	log  *slog.Logger
	left chan error
}

func (a *agentNode) Leave(ctx context.Context) error {
	a.log.Info("leaving the cluster (admin request)")
	err := a.Node.Leave(ctx)
	if err != nil {
		// Leave fails before it closes the node, except when closing
		// itself fails: then the agent has nothing left to run.
		if st, serr := a.Node.Status(context.Background()); serr == nil && st.State != "Shutdown" {
			a.log.Error("leave failed; still a member and running", "err", err)
			return err
		}
	}
	select {
	case a.left <- err:
	default:
	}
	return err
}

func (c *cli) agent(name string, args []string) error {
	f, a := agentFlags()
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.noArgs(pos); err != nil {
		return err
	}
	a.httpTokenEnv, _ = c.getenv("RAFTPACE_HTTP_TOKEN")
	cfg, specs, err := a.validate()
	if err != nil {
		return err
	}
	level, _ := parseLevel(a.logLevel)
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(c.stderr, hopts)
	if a.logFormat == "json" {
		h = slog.NewJSONHandler(c.stderr, hopts)
	}
	logger := slog.New(h)
	cfg.Logger = logger
	log := logger.With("component", "agent", "node", cfg.NodeID)

	if a.readyFile != "" {
		if err := os.Remove(a.readyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent: --ready-file: %w", err)
		}
		// Fail now, not after the node has joined the cluster, when the
		// file could not be written. The node makes --data-dir and its
		// parents: a directory among them need not exist yet.
		if dir := filepath.Dir(a.readyFile); !within(dir, a.dataDir) && !within(a.dataDir, dir) {
			if err := checkWritableDir(dir); err != nil {
				return fmt.Errorf("agent: --ready-file: %w", err)
			}
		}
	}
	tl, err := a.OpenTimeline(cfg.NodeID)
	if err != nil {
		return fmt.Errorf("agent: --timeline: %w", err)
	}
	if tl != nil {
		defer tl.Close()
	}
	var ln net.Listener
	if a.httpOn() {
		if ln, err = net.Listen("tcp", a.httpAddr); err != nil {
			return fmt.Errorf("agent: --http: %w", err)
		}
		defer ln.Close()
		// A host name passed validate: check the address it bound.
		if ta, ok := ln.Addr().(*net.TCPAddr); ok && a.httpToken == "" && !ta.IP.IsLoopback() {
			return &configError{problems: []string{fmt.Sprintf(
				"--http %q bound %s, a non-loopback address: it needs --http-token-file (or RAFTPACE_HTTP_TOKEN)", a.httpAddr, ta)}}
		}
	}
	log.Info("security", "node_tls", cfg.TLSCertFile != "", "gossip_encrypted", cfg.GossipKeyFile != "",
		"admin_token", a.httpToken != "")

	n, err := node.New(cfg)
	if err != nil {
		if errors.Is(err, node.ErrInvalidConfig) {
			return &configError{problems: strings.Split(err.Error(), "\n")}
		}
		return fmt.Errorf("agent: starting node: %w", err)
	}
	defer n.Close()

	left := make(chan error, 1)
	srvErr := make(chan error, 1)
	var srv *http.Server
	httpAddr := ""
	if ln != nil {
		httpAddr = ln.Addr().String()
		srv = &http.Server{
			Handler:           newHTTPHandler(n, admin.NewHandler(&agentNode{Node: n, log: log, left: left}, admin.WithToken(a.httpToken)), a.httpToken),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.With("component", "http", "node", cfg.NodeID).Handler(), slog.LevelWarn),
		}
		go func() { srvErr <- srv.Serve(ln) }()
		log.Info("admin API listening", "http", httpAddr)
	}

	if a.readyFile != "" {
		info := readyInfo{NodeID: cfg.NodeID, Addr: n.Addr(), GossipAddr: n.GossipAddr(), HTTPAddr: httpAddr, PID: os.Getpid()}
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := atomicfile.Write(a.readyFile, append(b, '\n'), 0o644); err != nil {
			c.shutdownHTTP(srv, log)
			return fmt.Errorf("agent: --ready-file: %w", err)
		}
		defer os.Remove(a.readyFile)
	}

	loadCtx, stopLoad := context.WithCancel(c.ctx)
	defer stopLoad()
	if a.gate.policy != "" {
		go func() {
			if err := a.gate.registerPolicy(loadCtx, n, log); err != nil && loadCtx.Err() == nil {
				log.Error("registering the policy file failed", "file", a.gate.policy, "err", err)
			}
		}()
	}
	var gateWait func() error
	if a.gate.Active() {
		if gateWait, err = loadgen.StartGate(loadCtx, n, a.gate.GateConfig, log); err != nil {
			c.shutdownHTTP(srv, log)
			return fmt.Errorf("agent: --slot-log: %w", err)
		}
	}
	var load *loadgen.Run
	if len(specs) > 0 {
		var rec loadgen.Recorder = loadgen.CountOnly{}
		if tl != nil {
			rec = tl
		}
		opts := a.Options(cfg.UseGrace, cfg.NodeID, log)
		load = loadgen.Start(loadCtx, loadgen.NodeTarget(n, a.loadMode, cfg.UseGrace), specs, opts, rec, log.With("load_mode", a.loadMode))
	}

	var result error
	leave := false
	select {
	case <-c.ctx.Done():
		if a.leaveOnTerminate {
			log.Info("signal received; leaving the cluster, then shutting down")
			leave = true
		} else {
			log.Info("signal received; shutting down without leaving the cluster (--leave-on-terminate=false)")
		}
	case err := <-left:
		if err != nil {
			log.Error("leave failed; shutting down without having left", "err", err)
			result = fmt.Errorf("agent: leave: %w", err)
		} else {
			log.Info("left the cluster; shutting down")
		}
	case err := <-srvErr:
		log.Error("admin API failed", "err", err)
		result = fmt.Errorf("agent: admin API: %w", err)
	}
	stopLoad()
	if leave {
		// Leave stops admitting first; the load sees ErrClosed and ends.
		// Bounded well inside the usual grace before SIGKILL (Kubernetes:
		// 30 s; systemd: 90 s).
		lctx, cancel := context.WithTimeout(context.Background(), agentLeaveTimeout)
		err := n.Leave(lctx)
		cancel()
		switch {
		case errors.Is(err, node.ErrLastVoter):
			log.Info("the cluster's last voter: stopping without leaving (its raft state stays in the data dir)")
		case err != nil:
			log.Error("could not leave the cluster; stopping without having left (the leader removes this member once it stops answering)", "err", err)
		}
	}
	if gateWait != nil {
		if err := gateWait(); err != nil {
			result = errors.Join(result, fmt.Errorf("agent: --slot-log: %w", err))
		}
	}
	if load != nil {
		load.Wait()
		if err := a.WriteReport(load, cfg.NodeID); err != nil {
			log.Error("writing the load report", "err", err)
			result = errors.Join(result, fmt.Errorf("agent: --load-report: %w", err))
		}
	}
	if tl != nil {
		if err := tl.Close(); err != nil {
			log.Error("closing timeline", "err", err)
			result = errors.Join(result, err)
		}
	}
	c.shutdownHTTP(srv, log)
	if err := n.Close(); err != nil {
		log.Error("closing node", "err", err)
		result = errors.Join(result, err)
	}
	log.Info("stopped")
	return result
}

// agentLeaveTimeout bounds the leave on SIGTERM.
const agentLeaveTimeout = 10 * time.Second

func (c *cli) shutdownHTTP(srv *http.Server, log *slog.Logger) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("admin API shutdown", "err", err)
		srv.Close()
	}
}
