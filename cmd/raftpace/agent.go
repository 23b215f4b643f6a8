package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
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

Workers that embed no node (Python, Ruby, shell) reserve through the
agent's data plane (docs/dataplane.md): on --socket PATH, a unix socket
that owner and group may use (mode 0660, no token), and on --http beside
the admin API, under its token.

With --ready-file the agent writes, once the node runs and the admin API
listens, a JSON document with the addresses it actually bound:
  {"node_id":..,"addr":..,"gossip_addr":..,"http_addr":..,"socket":..,"pid":..}
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
	nodeIDSet                bool // --node-id was given (even as "")
	bind, advertise          string
	gossipBind, gossipAdvert string
	bootstrapExpect          int
	join                     cmdline.List
	httpAddr                 string
	socket                   string
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
func (s *agentSecurity) register(f *cmdline.Flags) {
	f.StringVar(&s.tlsCA, "tls-ca", "", "cluster CA certificate `FILE` (PEM): with --tls-cert and --tls-key, mutual TLS\nbetween nodes; peers must hold a certificate this CA signed")
	f.StringVar(&s.tlsCert, "tls-cert", "", "this node's certificate `FILE` (PEM), signed by --tls-ca")
	f.StringVar(&s.tlsKey, "tls-key", "", "this node's private key `FILE` (PEM)")
	f.StringVar(&s.gossipKeyFile, "gossip-key-file", "", "`FILE` holding the gossip encryption key (base64 of 32 bytes); every node\nneeds the same one")
	f.StringVar(&s.httpTokenFile, "http-token-file", "", "`FILE` holding the bearer token the admin API requires on /v1/ routes;\nrequired when --http is not a loopback address (or set RAFTPACE_HTTP_TOKEN)")
	f.WithEnv("tls-ca", "tls-cert", "tls-key", "gossip-key-file", "http-token-file")
}

// agentFlags defines the agent's flags; the node's settings default to
// node.DefaultConfig's values.
func agentFlags() (*cmdline.Flags, *agentConfig) {
	f := cmdline.New("agent", "--data-dir DIR [flags]", agentAbout)
	f.Sections = agentSections
	a := &agentConfig{join: cmdline.List{Sep: ","}}
	def := node.DefaultConfig()
	f.StringVar(&a.nodeID, "node-id", "", "this node's `ID`, unique and stable across restarts (default: the host name)")
	f.StringVar(&a.dataDir, "data-dir", "", "`DIR` for the raft log, stable store and snapshots (required)")
	f.StringVar(&a.bind, "bind", "127.0.0.1:7400", "`HOST:PORT` for raft and RPC between nodes (port 0: any free port)")
	f.StringVar(&a.advertise, "advertise", "", "`HOST:PORT` other nodes dial for raft and RPC (default: the bound address)")
	f.StringVar(&a.gossipBind, "gossip-bind", "127.0.0.1:7401", "`HOST:PORT` for gossip, TCP and UDP (port 0: any free port)")
	f.StringVar(&a.gossipAdvert, "gossip-advertise", "", "gossip `HOST:PORT` other nodes use (default: the bound address)")
	f.IntVar(&a.bootstrapExpect, "bootstrap-expect", 0, "form a new cluster once `N` nodes started with the same value see each other;\n0 joins an existing cluster, 1 runs a single-node cluster")
	f.Var(&a.join, "join", "gossip `HOST:PORT[,...]` of cluster members to contact at start (may repeat)")
	f.StringVar(&a.httpAddr, "http", "127.0.0.1:7402", "`HOST:PORT` of the local admin API; \"\" or \"off\" disables it")
	f.StringVar(&a.socket, "socket", "", "unix socket `PATH` serving the data plane (docs/dataplane.md) to workers\nwithout a node, with no token: created mode 0660, a stale one replaced")
	f.StringVar(&a.clusterName, "cluster-name", def.ClusterName, "`NAME` carried in every gossip packet; nodes of other clusters are not heard")
	f.IntVar(&a.voters, "voters", def.Voters, "number of raft voters the leader keeps (`N`, 1-5); further nodes are nonvoters")
	f.DurationVar(&a.horizonAhead, "horizon-ahead", def.HorizonAhead, "`DURATION` the leader commits each key's horizon ahead of need;\nalso the longest pause in grants after a leader change")
	f.StringVar(&a.raftTiming, "raft-timing", "lan", "raft `TIMERS`: lan (failover in 1-2s) or fast (loopback tests)")
	f.StringVar(&a.logFormat, "log-format", "text", "log `FORMAT`: text or json")
	f.StringVar(&a.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	f.StringVar(&a.readyFile, "ready-file", "", "write the bound addresses as JSON to `PATH` once ready")
	f.StringVar(&a.loadMode, "load-mode", "raft", "how --load paces, `MODE` raft (ask the cluster: the real thing) or solo:\nTEST/DEMONSTRATION MODE with coordination turned off: each key is paced\nby a local GCRA at its full replicated rate and burst, never asking the\nleader, so N agents admit about N times the rate (shows a ceiling test can fail)")
	f.BoolVar(&a.noLeases, "no-leases", false, "ask the leader for every reservation instead of serving them from leased runs of slots")
	f.DurationVar(&a.leaseSpan, "lease-span", def.LeaseSpan, "the most time one lease covers at a key's full rate (`DURATION`)")
	f.DurationVar(&a.useGrace, "use-grace", def.UseGrace, "how late after its time a granted slot may still be used (`DURATION`);\nthe delta of the ceiling R*W+B+R*delta")
	f.StringVar(&a.postgresURL, "postgres", "", "PostgreSQL `URL` for the checkpoint, bootstrap of empty data dirs, discovery\n(without --join) and the pooled fallback; optional; never logged")
	f.StringVar(&a.postgresSchema, "postgres-schema", "raftpace", "`SCHEMA` for raftpace's tables in --postgres (created on first use)")
	f.DurationVar(&a.shareTTL, "share-ttl", def.ShareTTL, "how long a member's promise to the leader lasts (`DURATION`); a member not\nrenewed for this long paces itself at its fallback fraction")
	f.DurationVar(&a.fallbackFor, "fallback-for", def.FallbackFor, "how long a member may pace in fallback before it stops admitting (`DURATION`)")
	f.DurationVar(&a.reapMargin, "reap-margin", def.ReapMargin, "the leader reaps a member not heard from for share-ttl + fallback-for + this (`DURATION`)")
	f.BoolVar(&a.leaveOnTerminate, "leave-on-terminate", true, "on SIGTERM/SIGINT leave the cluster before exiting (for members replaced with\nnew ids and empty data dirs); =false stops without leaving, for members that\nrestart with the same --node-id and --data-dir")
	f.DurationVar(&a.failedServerAfter, "failed-server-after", 0, "the leader removes a member from raft after it left renewals unanswered\nthis long (`DURATION`, default share-ttl + 1s); its fraction comes back separately")
	f.DurationVar(&a.witnessTTL, "witness-ttl", def.WitnessTTL, "with --postgres: a member cut off from its leader and from Postgres paces locally\nat most this long after its last heartbeat (`DURATION`); a dead member's\nfraction returns once Postgres has missed its heartbeats")
	f.BoolVar(&a.unsafeReclaim, "unsafe-reclaim-without-fence", false, "UNSAFE, TESTS ONLY: the leader takes a silent member's fraction back without fencing it in Postgres (breaks the ceiling)")
	f.BoolVar(&a.unsafeFallbackFull, "unsafe-fallback-full-rate", false, "UNSAFE, TESTS ONLY: fallback paces at the full rate, not the node's fraction (breaks the ceiling)")
	f.BoolVar(&a.unsafeFreshStart, "unsafe-fresh-start", false, "UNSAFE, TESTS ONLY: a new leader ignores inherited horizons and quota counts (breaks the ceiling)")
	f.BoolVar(&a.unsafeSpendExpired, "unsafe-spend-expired", false, "UNSAFE, TESTS ONLY: leased slots are spent after their use-by (breaks the ceiling)")
	f.WithEnv("node-id", "data-dir", "bind", "advertise", "gossip-bind", "gossip-advertise", "bootstrap-expect",
		"join", "http", "socket", "cluster-name", "voters", "horizon-ahead", "raft-timing", "log-format", "log-level",
		"ready-file", "load-mode", "no-leases", "lease-span", "use-grace",
		"share-ttl", "fallback-for", "reap-margin", "postgres", "postgres-schema",
		"leave-on-terminate", "failed-server-after", "witness-ttl")
	f.Env["postgres"] = "RAFTPACE_POSTGRES_URL" // the name operators know from libpq-style setups
	a.agentSecurity.register(f)
	f.About += securityAbout
	a.loadFlags.register(f, true)
	a.gate.register(f)
	return f, a
}

// agentSections group agent -h as an operator looks for a flag; the load
// generator and the unsafe switches, for tests and demos, come last.
var agentSections = []cmdline.Section{
	{Title: "Cluster", Names: []string{"node-id", "data-dir", "cluster-name", "bootstrap-expect", "join", "voters", "leave-on-terminate", "policy"}},
	{Title: "Addresses", Names: []string{"bind", "advertise", "gossip-bind", "gossip-advertise", "http", "socket", "ready-file"}},
	{Title: "Security", Names: []string{"tls-ca", "tls-cert", "tls-key", "gossip-key-file", "http-token-file"}},
	{Title: "Postgres (checkpoint, bootstrap, pooled fallback, witness)", Names: []string{"postgres", "postgres-schema", "witness-ttl"}},
	{Title: "Tuning (the defaults suit one LAN)", Names: []string{"raft-timing", "horizon-ahead", "lease-span", "use-grace", "share-ttl", "fallback-for", "reap-margin", "failed-server-after"}},
	{Title: "Observability", Names: []string{"log-format", "log-level"}},
	{Title: "Testing: load generator and unsafe switches (never in production)", Names: []string{
		"load", "load-with", "load-rate", "load-duration", "load-max-wait", "load-mode", "load-http", "load-http-workers", "load-report",
		"load-slots", "slot-ttl", "slot-hold-min", "slot-hold-max", "slot-workers", "slot-log", "timeline", "timeline-buffer",
		"no-leases", "unsafe-fallback-full-rate", "unsafe-fresh-start", "unsafe-reclaim-without-fence", "unsafe-spend-expired"}},
}

// agent runs the agent: its flags checked (the node's settings by
// node.Config.Validate), then agent.Run.
func (c *cli) agent(name string, args []string) error {
	f, a := agentFlags()
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	a.httpTokenEnv, _ = c.getenv("RAFTPACE_HTTP_TOKEN")
	a.nodeIDSet = f.WasSet("node-id")
	cfg, err := a.validate()
	if err != nil {
		return envNamed(err, f)
	}
	level, _ := parseLevel(a.logLevel)
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(c.stderr, hopts)
	if a.logFormat == "json" {
		h = slog.NewJSONHandler(c.stderr, hopts)
	}
	cfg.Logger = slog.New(h)
	err = agent.Run(c.ctx, cfg)
	if errors.Is(err, node.ErrInvalidConfig) {
		return envNamed(&agent.ConfigError{Problems: flagProblems(err, nil)}, f)
	}
	return err
}

// envNamed adds to each problem that starts with a flag set from its
// environment variable the variable's name: "--share-ttl (from
// RAFTPACE_SHARE_TTL) ...", since the operator typed no --share-ttl.
func envNamed(err error, f *cmdline.Flags) error {
	var ce *agent.ConfigError
	if !errors.As(err, &ce) || len(f.FromEnv) == 0 {
		return err
	}
	for i, p := range ce.Problems {
		name, ok := strings.CutPrefix(p, "--")
		if !ok {
			continue
		}
		if j := strings.IndexAny(name, " :,="); j >= 0 {
			name = name[:j]
		}
		if env, ok := f.FromEnv[name]; ok {
			ce.Problems[i] = "--" + name + " (from " + env + ")" + p[2+len(name):]
		}
	}
	return ce
}

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
