package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
	"github.com/raftpace/raftpace/node"
)

// validate checks the command line and returns what agent.Run runs. It
// reports every problem at once: the agent's own (flags the node does not
// know of, and the stricter rules an operator's addresses follow), then
// the node's, from node.Config.Validate, naming the flags (nodeFlag).
func (a *agentConfig) validate() (agent.Config, error) {
	var problems []string
	reported := map[string]bool{} // flags the agent has found a problem with
	bad := func(err error) { problems = append(problems, err.Error()) }
	badFlag := func(flag string, err error) {
		reported[flag] = true
		bad(err)
	}

	if a.nodeID == "" && a.nodeIDSet {
		badFlag("--node-id", errors.New(`--node-id "": must not be empty (leave the flag out to use the host name)`))
	} else if a.nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			badFlag("--node-id", fmt.Errorf("--node-id: required (the host name is unavailable: %w)", err))
		}
		a.nodeID = host
	}
	if strings.TrimSpace(a.dataDir) == "" {
		badFlag("--data-dir", errors.New("--data-dir: required: the directory for the raft log and snapshots"))
	}
	// Addresses others dial must name a host and a port: the node would
	// accept port 0 there.
	for _, hp := range []struct{ name, v string }{{"advertise", a.advertise}, {"gossip-advertise", a.gossipAdvert}} {
		if hp.v == "" {
			continue
		}
		if err := checkHostPort(hp.name, hp.v, true); err != nil {
			badFlag("--"+hp.name, err)
		}
	}
	for _, j := range a.join.Items {
		if err := checkHostPort("join", j, true); err != nil {
			badFlag("--join", err)
		}
	}
	if a.httpOn() {
		if err := checkHostPort("http", a.httpAddr, false); err != nil {
			bad(fmt.Errorf("%w (or \"off\")", err))
		}
	}
	if a.socket != "" {
		if err := agent.CheckSocket(a.socket); err != nil {
			bad(err)
		}
	}
	a.agentSecurity.validate(bad, a.httpOn(), a.httpAddr)
	def := node.DefaultConfig()
	timing := def.Timing
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

	cfg := a.nodeConfig(def, timing)
	if err := cfg.Validate(); err != nil {
		problems = append(problems, flagProblems(err, reported)...)
	}
	if len(problems) > 0 {
		return agent.Config{}, &agent.ConfigError{Problems: problems}
	}
	httpAddr := ""
	if a.httpOn() {
		httpAddr = a.httpAddr
	}
	return agent.Config{
		Node:             cfg,
		HTTPAddr:         httpAddr,
		HTTPFlag:         a.httpAddr,
		HTTPToken:        a.httpToken,
		SocketPath:       a.socket,
		ReadyFile:        a.readyFile,
		LeaveOnTerminate: a.leaveOnTerminate,
		Load:             a.loadFlags.Config,
		LoadSpecs:        specs,
		LoadMode:         a.loadMode,
		Gate:             a.gate.GateConfig,
		Policy:           a.gate.policy,
	}, nil
}

// nodeConfig is the node's configuration as the flags set it, on top of
// def (node.DefaultConfig). A zero duration or an empty cluster name keeps
// the node's default, as the node has always read a zero there; the
// default --failed-server-after, 0, follows --share-ttl as the node's does.
func (a *agentConfig) nodeConfig(def node.Config, timing node.Timing) node.Config {
	orDefault := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	cfg := def
	cfg.NodeID = a.nodeID
	cfg.DataDir = a.dataDir
	cfg.BindAddr = a.bind
	cfg.AdvertiseAddr = a.advertise
	cfg.GossipBindAddr = a.gossipBind
	cfg.GossipAdvertiseAddr = a.gossipAdvert
	if a.clusterName != "" {
		cfg.ClusterName = a.clusterName
	}
	cfg.BootstrapExpect = a.bootstrapExpect
	cfg.Join = a.join.Items
	cfg.Voters = a.voters
	cfg.Timing = timing
	cfg.HorizonAhead = a.horizonAhead
	cfg.DisableLeases = a.noLeases
	cfg.LeaseSpan = orDefault(a.leaseSpan, def.LeaseSpan)
	cfg.UseGrace = orDefault(a.useGrace, def.UseGrace)
	cfg.ShareTTL = orDefault(a.shareTTL, def.ShareTTL)
	cfg.PostgresURL = a.postgresURL
	cfg.PostgresSchema = a.postgresSchema
	cfg.FallbackFor = orDefault(a.fallbackFor, def.FallbackFor)
	cfg.ReapMargin = orDefault(a.reapMargin, def.ReapMargin)
	cfg.FailedServerAfter = orDefault(a.failedServerAfter, cfg.ShareTTL+def.FailedServerAfter-def.ShareTTL)
	cfg.WitnessTTL = orDefault(a.witnessTTL, def.WitnessTTL)
	cfg.TLSCAFile = a.tlsCA
	cfg.TLSCertFile = a.tlsCert
	cfg.TLSKeyFile = a.tlsKey
	cfg.GossipKeyFile = a.gossipKeyFile
	cfg.Unsafe = node.Unsafe{
		FreshStart:          a.unsafeFreshStart,
		SpendExpired:        a.unsafeSpendExpired,
		FallbackFullRate:    a.unsafeFallbackFull,
		ReclaimWithoutFence: a.unsafeReclaim,
	}
	return cfg
}

// nodeFlag is the agent flag that sets each node.Config field: the node's
// validation problems name fields, the agent's name the flags typed.
var nodeFlag = map[string]string{
	"NodeID":              "--node-id",
	"DataDir":             "--data-dir",
	"BindAddr":            "--bind",
	"AdvertiseAddr":       "--advertise",
	"GossipBindAddr":      "--gossip-bind",
	"GossipAdvertiseAddr": "--gossip-advertise",
	"ClusterName":         "--cluster-name",
	"BootstrapExpect":     "--bootstrap-expect",
	"Join":                "--join",
	"Voters":              "--voters",
	"Timing":              "--raft-timing",
	"HorizonAhead":        "--horizon-ahead",
	"UseGrace":            "--use-grace",
	"LeaseSpan":           "--lease-span",
	"ShareTTL":            "--share-ttl",
	"FallbackFor":         "--fallback-for",
	"ReapMargin":          "--reap-margin",
	"FailedServerAfter":   "--failed-server-after",
	"WitnessTTL":          "--witness-ttl",
	"PostgresURL":         "--postgres",
	"PostgresSchema":      "--postgres-schema",
	"TLSCAFile":           "--tls-ca",
	"TLSCertFile":         "--tls-cert",
	"TLSKeyFile":          "--tls-key",
	"GossipKeyFile":       "--gossip-key-file",
}

// nodeFieldRE matches the fields of nodeFlag as words.
var nodeFieldRE = func() *regexp.Regexp {
	var fields []string
	for f := range nodeFlag {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	return regexp.MustCompile(`\b(` + strings.Join(fields, "|") + `)\b`)
}()

// flagProblems turns the node's validation error (one problem a line,
// each "invalid config: FIELD ...") into the agent's problems: the prefix
// dropped, every field named by its flag outside quoted values. A problem
// whose leading field's flag is in skip is left out: the agent has already
// said what is wrong with that flag.
func flagProblems(err error, skip map[string]bool) []string {
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimPrefix(line, node.ErrInvalidConfig.Error()+": ")
		field := line
		if i := strings.IndexAny(line, " :,"); i >= 0 {
			field = line[:i]
		}
		if fl, ok := nodeFlag[field]; ok && skip[fl] {
			continue
		}
		out = append(out, renameFields(line))
	}
	return out
}

// renameFields replaces each node.Config field named in s by its flag,
// except inside double-quoted text (values, which may hold anything).
func renameFields(s string) string {
	var b strings.Builder
	inQuote := false
	start := 0
	flush := func(end int) {
		part := s[start:end]
		if !inQuote {
			part = nodeFieldRE.ReplaceAllStringFunc(part, func(f string) string { return nodeFlag[f] })
		}
		b.WriteString(part)
		start = end
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if inQuote {
				i++ // an escaped character inside a quoted value
			}
		case '"':
			if inQuote {
				flush(i + 1) // through the closing quote
				inQuote = false
				continue
			}
			flush(i)
			inQuote = true
		}
	}
	flush(len(s))
	return b.String()
}

// validate checks the admin token flags and reads the token. The TLS and
// gossip key files are the node's to check (node.Config.Validate).
func (s *agentSecurity) validate(bad func(error), httpOn bool, httpAddr string) {
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

func (a *agentConfig) httpOn() bool { return a.httpAddr != "" && a.httpAddr != "off" }
