package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/admin"
	"github.com/raftpace/raftpace/node"
)

// validate checks the command line and returns what agent.Run runs. It
// reports every problem at once.
func (a *agentConfig) validate() (agent.Config, error) {
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
		return agent.Config{}, &agent.ConfigError{Problems: problems}
	}
	httpAddr := ""
	if a.httpOn() {
		httpAddr = a.httpAddr
	}
	return agent.Config{
		Node: node.Config{
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
		},
		HTTPAddr:         httpAddr,
		HTTPFlag:         a.httpAddr,
		HTTPToken:        a.httpToken,
		ReadyFile:        a.readyFile,
		LeaveOnTerminate: a.leaveOnTerminate,
		Load:             a.loadFlags.Config,
		LoadSpecs:        specs,
		LoadMode:         a.loadMode,
		Gate:             a.gate.GateConfig,
		Policy:           a.gate.policy,
	}, nil
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
