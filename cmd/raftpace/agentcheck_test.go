package main

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
)

// The node's settings are checked by node.Config.Validate; its problems
// come back naming the flags the operator typed, never the Config fields.
func TestAgent_NodeValidationNamesFlags(t *testing.T) {
	t.Parallel()
	base := []string{"agent", "--node-id", "t1", "--data-dir", t.TempDir(), "--bind", "127.0.0.1:0",
		"--gossip-bind", "127.0.0.1:0", "--http", "off"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--voters", "7"}, `--voters "7": must be 1-5`},
		{[]string{"--voters", "0"}, `--voters "0": must be 1-5`}, // zero is no default on the command line
		{[]string{"--horizon-ahead", "0s"}, `--horizon-ahead "0s": must be 10ms..1m`},
		{[]string{"--bootstrap-expect", "-1"}, `--bootstrap-expect "-1": must be 0-64`},
		{[]string{"--lease-span", "600ms"}, `--lease-span "600ms": must be at least 1ms and less than --horizon-ahead/2`},
		{[]string{"--share-ttl", "10ms"}, `--share-ttl "10ms": must be 30ms..10m`},
		{[]string{"--failed-server-after", "2h"}, `--failed-server-after "2h0m0s": must be --share-ttl/2..1h`},
		{[]string{"--gossip-advertise", "example.com:7401"}, `--gossip-advertise "example.com:7401": host must be an IP address`},
		{[]string{"--cluster-name", strings.Repeat("c", 300)}, "--cluster-name \"ccc"},
		{[]string{"--postgres", "postgres://u:secret@h:99999999/db"}, "--postgres: cannot parse"},
	}
	for _, tc := range tests {
		r := runCLI(t.Context(), nil, append(slices.Clone(base), tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "raftpace: agent: invalid configuration:\n  "+tc.want) {
			t.Errorf("agent %q: exit %d, stderr:\n%s\nwant exit 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		for _, field := range []string{"invalid config:", "Voters", "HorizonAhead", "LeaseSpan", "ShareTTL", "PostgresURL", "secret"} {
			if strings.Contains(r.stderr, field) {
				t.Errorf("agent %q: stderr names %q:\n%s", tc.args, field, r.stderr)
			}
		}
	}
}

// A flag the agent has a rule of its own for is reported once: the node's
// problem with the same value is left out.
func TestAgent_OneProblemPerFlag(t *testing.T) {
	t.Parallel()
	r := runCLI(t.Context(), nil, "agent", "--node-id", "t1", "--data-dir", " ", "--bind", "127.0.0.1:0",
		"--gossip-bind", "127.0.0.1:0", "--http", "off", "--advertise", ":0", "--join", "nope")
	for _, flag := range []string{"--data-dir", "--advertise", "--join"} {
		if n := strings.Count(r.stderr, "\n  "+flag); n != 1 {
			t.Errorf("%s reported %d times:\n%s", flag, n, r.stderr)
		}
	}
}

// Flags left at their defaults give node.DefaultConfig's settings; a zero
// duration keeps the node's default, and --failed-server-after follows
// --share-ttl as the node's default does.
func TestAgent_NodeConfigFromFlags(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) node.Config {
		t.Helper()
		f, a := agentFlags()
		c := &cli{getenv: func(string) (string, bool) { return "", false }}
		args = append([]string{"--node-id", "t1", "--data-dir", filepath.Join(t.TempDir(), "d"), "--http", "off"}, args...)
		if _, err := c.parse(f, args); err != nil {
			t.Fatal(err)
		}
		cfg, err := a.validate()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Node
	}
	def := node.DefaultConfig()
	got := parse()
	got.NodeID, got.DataDir, got.BindAddr, got.GossipBindAddr = "", "", "", ""
	got.PostgresSchema, got.Join = "", nil
	want := def
	want.NodeID, want.DataDir = "", ""
	want.Logger = got.Logger
	if !cmpConfig(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	got = parse("--use-grace", "0s", "--share-ttl", "5s", "--cluster-name", "")
	if got.UseGrace != def.UseGrace || got.ClusterName != def.ClusterName || got.FailedServerAfter != 6*time.Second {
		t.Errorf("zero values: UseGrace %v ClusterName %q FailedServerAfter %v", got.UseGrace, got.ClusterName, got.FailedServerAfter)
	}
}

func cmpConfig(a, b node.Config) bool {
	a.Logger, b.Logger = nil, nil
	return reflect.DeepEqual(a, b)
}

func TestRenameFields(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`LeaseSpan "5ms": must be less than HorizonAhead/2`:            `--lease-span "5ms": must be less than --horizon-ahead/2`,
		`NodeID: fsm: invalid id "Voters \"x\" DataDir": contains`:     `--node-id: fsm: invalid id "Voters \"x\" DataDir": contains`,
		`TLSCAFile, TLSCertFile and TLSKeyFile (TLSCertFile given)`:    `--tls-ca, --tls-cert and --tls-key (--tls-cert given)`,
		`MaxSlotTTL "1h": must be 10ms..30m`:                           `MaxSlotTTL "1h": must be 10ms..30m`,
		`node: invalid config: GossipBindAddr: lookup x: no such host`: `node: invalid config: --gossip-bind: lookup x: no such host`,
	} {
		if got := renameFields(in); got != want {
			t.Errorf("renameFields(%q) = %q, want %q", in, got, want)
		}
	}
}
