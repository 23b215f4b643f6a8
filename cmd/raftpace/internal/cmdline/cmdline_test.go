package cmdline

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestRead_Interleaved(t *testing.T) {
	f := New("x", "", "")
	rate := f.String("rate", "", "")
	n := f.Int("n", 0, "")
	l := List{Sep: ","}
	f.Var(&l, "l", "")
	f.WithEnv("n", "l")
	pos, err := f.Read([]string{"KEY", "--rate", "5", "FILE", "--l", "a,b", "--l", "c", "--", "-k"}, env(map[string]string{"RAFTPACE_N": "7"}))
	if err != nil {
		t.Fatal(err)
	}
	if *rate != "5" || *n != 7 || !slices.Equal(pos, []string{"KEY", "FILE", "-k"}) ||
		!slices.Equal(l.Items, []string{"a", "b", "c"}) {
		t.Errorf("rate %q n %d pos %q l %q", *rate, *n, pos, l.Items)
	}
	if f.FromEnv["n"] != "RAFTPACE_N" || f.FromEnv["l"] != "" {
		t.Errorf("FromEnv = %v, want only n from RAFTPACE_N", f.FromEnv)
	}
}

// The command line wins over the environment; an empty variable is unset.
func TestRead_EnvPrecedence(t *testing.T) {
	f := New("x", "", "")
	a, b := f.String("a", "da", ""), f.String("b", "db", "")
	f.WithEnv("a", "b")
	if _, err := f.Read([]string{"--a", "cli"}, env(map[string]string{"RAFTPACE_A": "env", "RAFTPACE_B": ""})); err != nil {
		t.Fatal(err)
	}
	if *a != "cli" || *b != "db" || len(f.FromEnv) != 0 {
		t.Errorf("a %q b %q FromEnv %v", *a, *b, f.FromEnv)
	}
}

func TestRead_Mistakes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
		// withUsage: the mistake is in the command line's shape, and the
		// whole usage follows the message; a wrong value's message says
		// all and only a hint to -h follows.
		withUsage bool
	}{
		{"a flag after --", []string{"--", "-k", "--rate", "5"}, nil, "--rate after --: flags go before --", false},
		{"unknown flag as typed", []string{"-nope"}, nil, "flag provided but not defined: -nope", true},
		{"missing value", []string{"--rate"}, nil, "flag needs an argument: --rate", true},
		{"bad value names the flag", []string{"--n", "x"}, nil, `invalid value "x" for flag --n`, false},
		{"bad variable names it", nil, map[string]string{"RAFTPACE_N": "x"}, `RAFTPACE_N="x"`, false},
		{"timeout 0", []string{"--timeout", "0s"}, nil, "must be > 0", false},
		{"timeout < 0", []string{"--timeout", "-1s"}, nil, "must be > 0", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New("x", "KEY", "")
			f.String("rate", "", "")
			f.Int("n", 0, "")
			var d PositiveDuration
			f.Var(&d, "timeout", "")
			f.WithEnv("n")
			_, err := f.Read(tc.args, env(tc.env))
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(ue.Msg, tc.want) || ue.Cmd != "x" || (ue.Usage != "") != tc.withUsage {
				t.Errorf("Read(%q) = %#v, want a usage error with %q (usage shown: %v)", tc.args, err, tc.want, tc.withUsage)
			}
		})
	}
	if _, err := New("x", "", "").Read([]string{"-h"}, env(nil)); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v, want ErrHelp", err)
	}
}

// Usage places each flag under its section, the rest under "Other flags",
// with its default and variable.
func TestUsage_Sections(t *testing.T) {
	f := New("agent", "--data-dir DIR", "Runs a node.")
	f.String("data-dir", "", "`DIR` for the data")
	f.String("bind", "127.0.0.1:7400", "raft `HOST:PORT`")
	f.Bool("stray", false, "no section")
	f.WithEnv("data-dir")
	f.Sections = []Section{{Title: "Cluster", Names: []string{"data-dir"}}, {Title: "Addresses", Names: []string{"bind"}}}
	u := f.Usage()
	for _, want := range []string{
		"Usage: raftpace agent --data-dir DIR\n\nRuns a node.\n",
		"\nCluster:\n  --data-dir DIR\n        DIR for the data\n        (env RAFTPACE_DATA_DIR)\n",
		"\nAddresses:\n  --bind HOST:PORT\n        raft HOST:PORT\n        (default 127.0.0.1:7400)\n",
		"\nOther flags:\n  --stray\n",
	} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q:\n%s", want, u)
		}
	}
}
