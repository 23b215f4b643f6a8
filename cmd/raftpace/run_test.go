package main

import (
	"flag"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRun_UsageAndHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		code       int
		stdout     string // substring; "" = no check
		stderr     string // substring; "" = no check
		emptyOut   bool   // stdout must be empty
		noUsageOut bool
	}{
		{args: nil, code: 2, stderr: "Usage:\n  raftpace COMMAND", emptyOut: true},
		{args: []string{"help"}, code: 0, stdout: "Operator (talks to an agent's admin API"},
		{args: []string{"--help"}, code: 0, stdout: "Usage:\n  raftpace COMMAND"},
		{args: []string{"help", "agent"}, code: 0, stdout: "Usage: raftpace agent --data-dir DIR"},
		{args: []string{"help", "nope"}, code: 2, stderr: `raftpace help: unknown command "nope"`},
		{args: []string{"frobnicate"}, code: 2, stderr: "raftpace: unknown command \"frobnicate\"\nRun 'raftpace help'", emptyOut: true},
		{args: []string{"agent", "-h"}, code: 0, stdout: "(default 127.0.0.1:7400; env RAFTPACE_BIND)"},
		{args: []string{"agent", "--help"}, code: 0, stdout: "--load-mode MODE"},
		{args: []string{"status", "-h"}, code: 0, stdout: "env RAFTPACE_ADDR"},
		{args: []string{"check", "-h"}, code: 0, stdout: "Usage: raftpace check --rate R"},
		{args: []string{"demo", "-h"}, code: 0, stdout: "--duration"},
		{args: []string{"limit"}, code: 2, stderr: "missing subcommand"},
		{args: []string{"limit", "-h"}, code: 0, stdout: "raftpace limit set KEY --rate R"},
		{args: []string{"limit", "frob"}, code: 2, stderr: `unknown subcommand "frob"`},
		{args: []string{"limit", "--addr", "h:1"}, code: 2, stderr: "missing subcommand"},
		{args: []string{"limit", "--addr", "h:1", "-h"}, code: 0, stdout: "raftpace limit set KEY"},
		{args: []string{"limit", "--addr", "h:1", "set", "--bogus"}, code: 2, stderr: "raftpace limit set: flag provided but not defined: --bogus"},
		{args: []string{"limit", "set", "-h"}, code: 0, stdout: "--rate R"},
		{args: []string{"help", "limit", "set"}, code: 0, stdout: "--burst B"},
		{args: []string{"status", "--bogus"}, code: 2, stderr: "raftpace status: flag provided but not defined: --bogus\n\nUsage: raftpace status", emptyOut: true},
		{args: []string{"agent", "--data-dir", "/tmp/x", "-x"}, code: 2, stderr: "flag provided but not defined: -x"},
		{args: []string{"agent", "--bootstrap-expect", "three"}, code: 2, stderr: `invalid value "three" for flag --bootstrap-expect`},
		{args: []string{"agent", "--data-dir"}, code: 2, stderr: "flag needs an argument: --data-dir"},
		{args: []string{"agent", "stray"}, code: 2, stderr: `unexpected argument "stray"`},
		{args: []string{"status", "extra"}, code: 2, stderr: `raftpace status: unexpected argument "extra"`},
		{args: []string{"version"}, code: 0, stdout: "raftpace "},
		{args: []string{"version", "x"}, code: 2},
		{args: []string{"join"}, code: 2, stderr: "at least one gossip ADDR"},
	}
	for _, tc := range tests {
		r := runCLI(t.Context(), nil, tc.args...)
		if r.code != tc.code {
			t.Errorf("raftpace %q: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, r.code, tc.code, r.stdout, r.stderr)
			continue
		}
		if tc.stdout != "" && !strings.Contains(r.stdout, tc.stdout) {
			t.Errorf("raftpace %q: stdout lacks %q:\n%s", tc.args, tc.stdout, r.stdout)
		}
		if tc.stderr != "" && !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("raftpace %q: stderr lacks %q:\n%s", tc.args, tc.stderr, r.stderr)
		}
		if tc.emptyOut && r.stdout != "" {
			t.Errorf("raftpace %q: stdout not empty:\n%s", tc.args, r.stdout)
		}
		if tc.code == 0 && r.stderr != "" {
			t.Errorf("raftpace %q: stderr not empty:\n%s", tc.args, r.stderr)
		}
	}
}

func TestAgent_ConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"agent", "--node-id", "t1", "--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0", "--http", "off"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string // substrings of stderr
	}{
		{"missing data dir", base, nil, 2, []string{
			"raftpace: agent: invalid configuration:\n  --data-dir: required"}},
		{"bad bind", append(slices.Clone(base), "--data-dir", dir, "--bind", "nope"), nil, 2, []string{
			`--bind "nope": must be host:port`}},
		{"bad port", append(slices.Clone(base), "--data-dir", dir, "--bind", "127.0.0.1:99999"), nil, 2, []string{
			`--bind "127.0.0.1:99999": port must be 0-65535`}},
		{"every problem at once", []string{"agent", "--node-id", "a b", "--bind", "x", "--gossip-bind", "y:z",
			"--advertise", ":7400", "--join", "h:1,bad", "--http", "h", "--raft-timing", "slow", "--log-format", "xml",
			"--log-level", "loud", "--load", "k:0", "--load", ":3", "--load-mode", "alone", "--voters", "9"}, nil, 2, []string{
			`--node-id: fsm: invalid id "a b": contains whitespace`,
			"--data-dir: required",
			`--bind "x": must be host:port`,
			`--gossip-bind "y:z": port must be 0-65535`,
			`--advertise ":7400": must name a host`,
			`--join "bad": must be HOST:PORT`,
			`--http "h": must be HOST:PORT (or "off")`,
			`--raft-timing "slow": must be lan or fast`,
			`--log-format "xml": must be text or json`,
			`--log-level "loud": must be debug, info, warn or error`,
			`--load "k:0": concurrency 0 must be 1-10000`,
			`--load ":3": fsm: invalid key "": must not be empty`,
			`--load-mode "alone": must be raft or solo`,
			`--voters "9": must be 1-5`,
		}},
		{"timeline without load", append(slices.Clone(base), "--data-dir", dir, "--timeline", filepath.Join(dir, "tl")), nil, 2, []string{
			"--timeline: only meaningful with --load"}},
		{"node validation", append(slices.Clone(base), "--data-dir", dir, "--bootstrap-expect", "100"), nil, 2, []string{
			"raftpace: agent: invalid configuration:\n  --bootstrap-expect \"100\": must be 0-64"}},
		{"env", []string{"agent"}, map[string]string{
			"RAFTPACE_DATA_DIR": dir, "RAFTPACE_NODE_ID": "t1", "RAFTPACE_BIND": "bad-from-env",
			"RAFTPACE_GOSSIP_BIND": "127.0.0.1:0", "RAFTPACE_HTTP": "off"}, 2, []string{
			`--bind (from RAFTPACE_BIND) "bad-from-env": must be host:port`}},
		{"env bad number", []string{"agent"}, map[string]string{"RAFTPACE_BOOTSTRAP_EXPECT": "x"}, 2, []string{
			`RAFTPACE_BOOTSTRAP_EXPECT="x": parse error`}},
		{"flag wins over env", append(slices.Clone(base), "--data-dir", dir, "--bind", "nope"),
			map[string]string{"RAFTPACE_BIND": "127.0.0.1:0"}, 2, []string{`--bind "nope"`}},
		{"http port taken", append(slices.Clone(base[:len(base)-2]), "--data-dir", dir, "--http", "256.0.0.1:1"), nil, 1, []string{
			"raftpace: agent: --http: listen tcp"}},
	}
	for _, tc := range tests {
		r := runCLI(t.Context(), tc.env, tc.args...)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstderr: %s", tc.name, r.code, tc.code, r.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, r.stderr)
			}
		}
	}
}

func TestLimitSet_BadArgs(t *testing.T) {
	t.Parallel()
	// Nothing listens here: arguments must be refused before any request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"limit", "set", "k", "--rate", "abc"}, 2, `raftpace limit set: --rate: invalid number "abc"`},
		{[]string{"limit", "set", "k", "--rate", "5", "--burst", "1.5"}, 2, "--burst: invalid integer \"1.5\"\nRun 'raftpace limit set -h' for usage."},
		{[]string{"limit", "set", "--rate", "5"}, 2, "KEY is required"},
		{[]string{"limit", "set", "k"}, 2, "--rate is required"},
		{[]string{"limit", "set", "k", "j", "--rate", "5"}, 2, `unexpected argument "j"`},
		// Values the cluster would refuse are refused here, naming the
		// flags, before any request: usage errors.
		{[]string{"limit", "set", "k", "--rate", "0"}, 2, "raftpace limit set: --rate 0: must be > 0\nRun 'raftpace limit set -h' for usage."},
		{[]string{"limit", "set", "k", "--rate", "-2"}, 2, "--rate -2: must be > 0"},
		{[]string{"limit", "set", "k", "--rate", "NaN"}, 2, "--rate NaN: must be finite"},
		{[]string{"limit", "set", "k", "--rate", "inf"}, 2, "--rate +Inf: must be finite"},
		{[]string{"limit", "set", "k", "--rate", "1e999"}, 2, "--rate +Inf: must be finite"},
		{[]string{"limit", "set", "k", "--rate", "1e-300"}, 2, "--rate 1e-300/s: below the minimum"},
		{[]string{"limit", "set", "k", "--rate", "5", "--burst", "0"}, 2, "--burst 0: must be >= 1"},
		{[]string{"limit", "set", "k", "--rate", "5", "--burst", "100000000000"}, 2, "--burst 100000000000: must be <= 1000000"},
		{[]string{"limit", "set", "k", "--rate", "0", "--burst", "0"}, 2, "--rate 0: must be > 0; --burst 0: must be >= 1"},
		{[]string{"limit", "set", "k", "--rate", "5", "--quota", "100/week"}, 2, `--quota "100/week": period "week": must be minute, hour, day or month`},
		{[]string{"limit", "set", "k", "--rate", "5", "--quota", "100"}, 2, `--quota "100": want COUNT/PERIOD, as 100000/day`},
		{[]string{"limit", "set", "k", "--rate", "5", "--quota", "0/day"}, 2, "--quota 0: must be in [1, 1125899906842624] (MaxQuota)"},
		{[]string{"limit", "remaining"}, 2, "KEY is required"},
		{[]string{"limit", "set", "a\tb", "--rate", "5"}, 2, `KEY: invalid key "a\tb": contains whitespace U+0009`},
		{[]string{"limit", "set", strings.Repeat("k", 300), "--rate", "5"}, 2, "longer than the maximum 256"},
		{[]string{"limit", "set", "--", "-k", "--rate", "5"}, 2, "--rate after --: flags go before --"},
		{[]string{"pause", "k", "--for", "1s", "--timeout", "0s"}, 2, `invalid value "0s" for flag --timeout: must be > 0`},
		{[]string{"status", "--timeout", "-1s"}, 2, "invalid value \"-1s\" for flag --timeout: must be > 0\nRun 'raftpace status -h' for usage."},
		// No agent answered: nothing was asked, exit 3.
		{[]string{"limit", "set", "k", "--rate", "5"}, 3, "raftpace: limit set \"k\": cannot reach agent at " + dead + ": "},
		{[]string{"limit", "get", "k"}, 3, "is it running? (--addr)"},
		{[]string{"status"}, 3, "raftpace: status: cannot reach agent at " + dead},
	}
	for _, tc := range tests {
		args := append(slices.Clone(tc.args), "--addr", dead, "--timeout", "5s")
		r := runCLI(t.Context(), nil, args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("raftpace %q: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	// A key starting with '-' after every flag and --.
	r := runCLI(t.Context(), nil, "limit", "set", "--rate", "5", "--addr", dead, "--timeout", "5s", "--", "-k")
	if r.code != 3 || !strings.Contains(r.stderr, `raftpace: limit set "-k": cannot reach agent`) {
		t.Errorf("limit set --rate 5 -- -k: exit %d, %s", r.code, r.stderr)
	}
	// RAFTPACE_ADDR is used when --addr is absent.
	r = runCLI(t.Context(), map[string]string{"RAFTPACE_ADDR": dead}, "status", "--timeout", "5s")
	if r.code != 3 || !strings.Contains(r.stderr, dead) {
		t.Errorf("status with RAFTPACE_ADDR: exit %d, %s", r.code, r.stderr)
	}
}

func TestParseLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		key  string
		conc int
		err  string
	}{
		{"k", "k", 1, ""},
		{"k:4", "k", 4, ""},
		{"provider:acme/cred:42:1", "provider:acme/cred:42", 1, ""},
		{"provider:acme", "provider:acme", 1, ""},
		{"k:0", "", 0, "concurrency 0"},
		{":3", "", 0, "must not be empty"},
	}
	for _, tc := range tests {
		s, err := parseLoad(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseLoad(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.Key != tc.key || s.Concurrency != tc.conc {
			t.Errorf("parseLoad(%q) = %+v, %v", tc.in, s, err)
		}
	}
}

// agent -h groups every flag under a section: a new flag must be placed
// (the test names it), never left in "Other flags".
func TestAgentHelp_Sections(t *testing.T) {
	t.Parallel()
	f, _ := agentFlags()
	placed := map[string]bool{}
	for _, s := range agentSections {
		for _, n := range s.Names {
			if f.Lookup(n) == nil {
				t.Errorf("section %q names %q, which is no agent flag", s.Title, n)
			}
			placed[n] = true
		}
	}
	f.VisitAll(func(fl *flag.Flag) {
		if !placed[fl.Name] {
			t.Errorf("--%s is in no section of agent -h (agentSections)", fl.Name)
		}
	})
	u := f.Usage()
	if strings.Contains(u, "Other flags:") || strings.Index(u, "\nCluster:\n") > strings.Index(u, "\nTesting: load generator") {
		t.Errorf("agent -h sections out of order or incomplete:\n%s", u)
	}
}
