// Package cmdline is the raftpace command's flag surface: a flag set per
// command whose flags may follow positional arguments, each flag's
// RAFTPACE_* environment equivalent, help grouped in titled sections, and
// messages that name a flag as the operator typed it. A mistake comes back
// as a *UsageError (exit status 2), help as ErrHelp.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrHelp: help was asked for (-h); the caller prints Usage.
var ErrHelp = errors.New("help requested")

// UsageError is a command-line mistake: exit 2. Usage, when set, is printed
// after the message; otherwise a hint to -h.
type UsageError struct {
	Msg   string
	Usage string
	Cmd   string
}

func (e *UsageError) Error() string { return e.Msg }

// Flags is a FlagSet with a usage text, environment equivalents and
// support for flags after positional arguments.
type Flags struct {
	*flag.FlagSet
	Cmd      string // "limit set"
	Synopsis string // "KEY --rate R [--burst B]"
	About    string // paragraphs after the synopsis
	// Env maps a flag to the environment variable that sets it when the
	// command line does not.
	Env map[string]string
	// Sections, when set, group the flags in the help: each flag under the
	// first section naming it, the others under "Other flags".
	Sections []Section
	// FromEnv names the flags Parse set from their environment variable
	// (flag name -> variable), so a problem with one names what was typed.
	FromEnv map[string]string
}

// WasSet reports whether the command line set the flag (even to "").
func (f *Flags) WasSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// New returns the flags of command cmd ("limit set").
func New(cmd, synopsis, about string) *Flags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, Cmd: cmd, Synopsis: synopsis, About: about, Env: map[string]string{}}
}

// WithEnv gives the named flags their RAFTPACE_* equivalents.
func (f *Flags) WithEnv(names ...string) {
	for _, n := range names {
		f.Env[n] = EnvName(n)
	}
}

// EnvName is the variable of a flag: --share-ttl, RAFTPACE_SHARE_TTL.
func EnvName(flagName string) string {
	return "RAFTPACE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Section is a titled group of flags in a command's help.
type Section struct {
	Title string
	Names []string
}

// Usage renders the command's help: synopsis, description, flags (by
// section, when the command has sections).
func (f *Flags) Usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: raftpace %s %s\n", f.Cmd, f.Synopsis)
	if f.About != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(f.About, "\n"))
	}
	if len(f.Sections) == 0 {
		first := true
		f.VisitAll(func(fl *flag.Flag) {
			if first {
				b.WriteString("\nFlags:\n")
				first = false
			}
			f.writeFlag(&b, fl)
		})
		return b.String()
	}
	placed := map[string]bool{}
	for _, sec := range f.Sections {
		fmt.Fprintf(&b, "\n%s:\n", sec.Title)
		for _, n := range sec.Names {
			if fl := f.Lookup(n); fl != nil && !placed[n] {
				placed[n] = true
				f.writeFlag(&b, fl)
			}
		}
	}
	first := true
	f.VisitAll(func(fl *flag.Flag) {
		if placed[fl.Name] {
			return
		}
		if first {
			b.WriteString("\nOther flags:\n")
			first = false
		}
		f.writeFlag(&b, fl)
	})
	return b.String()
}

// writeFlag renders one flag of the help.
func (f *Flags) writeFlag(b *strings.Builder, fl *flag.Flag) {
	typ, text := flag.UnquoteUsage(fl)
	if typ == "value" {
		typ = ""
	}
	fmt.Fprintf(b, "  --%s", fl.Name)
	if typ != "" {
		fmt.Fprintf(b, " %s", typ)
	}
	b.WriteString("\n")
	for _, line := range strings.Split(text, "\n") {
		fmt.Fprintf(b, "        %s\n", line)
	}
	var extra []string
	if d := fl.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
		extra = append(extra, fmt.Sprintf("default %s", d))
	}
	if e, ok := f.Env[fl.Name]; ok {
		extra = append(extra, "env "+e)
	}
	if len(extra) > 0 {
		fmt.Fprintf(b, "        (%s)\n", strings.Join(extra, "; "))
	}
}

// Read parses args, allowing flags after positional arguments, then fills
// every flag not given on the command line from its environment variable
// (looked up with getenv). It returns the positional arguments. -h returns
// ErrHelp: the caller prints Usage.
func (f *Flags) Read(args []string, getenv func(string) (string, bool)) ([]string, error) {
	var pos []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			return nil, ErrHelp
		}
		if err != nil {
			msg := flagMessage(err, args)
			if strings.HasPrefix(msg, "invalid value ") {
				return nil, f.ValueError("%s", msg)
			}
			return nil, f.UsageError("%s", msg)
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			// Everything after -- is positional. A command's own flag
			// there (limit set -- -key --rate 5) is a mistake, not a
			// second key: say where flags go.
			for _, a := range rest[min(1, len(rest)):] {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if strings.HasPrefix(a, "-") && f.Lookup(name) != nil {
					return nil, f.ValueError("%s after --: flags go before --, which only marks where a KEY starting with '-' begins (raftpace %s [flags] -- -key)", a, f.Cmd)
				}
			}
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	names := make([]string, 0, len(f.Env))
	for n := range f.Env {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v, ok := getenv(f.Env[n])
		if set[n] || !ok || v == "" {
			continue
		}
		if err := f.Set(n, v); err != nil {
			return nil, f.ValueError("%s=%q: %v", f.Env[n], v, err)
		}
		if f.FromEnv == nil {
			f.FromEnv = map[string]string{}
		}
		f.FromEnv[n] = f.Env[n]
	}
	return pos, nil
}

// flagMessage rewrites the flag package's messages to name a flag as it
// was typed (-x or --x), and others as the usage does (--name).
func flagMessage(err error, args []string) string {
	msg := err.Error()
	for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
		name, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		typed := "--" + name
		for _, a := range args {
			a, _, _ = strings.Cut(a, "=")
			if a == "-"+name || a == "--"+name {
				typed = a
				break
			}
		}
		return strings.TrimSuffix(p, "-") + typed
	}
	// `invalid value "x" for flag -rate: ...`
	return strings.Replace(msg, " for flag -", " for flag --", 1)
}

// Rate parses a required --rate value. Out of range values come back as
// +-Inf, 0 or the largest numbers, and limit validation then names the rule
// they break; only text that is no number at all is refused here.
func (f *Flags) Rate(s string) (float64, error) {
	if s == "" {
		return 0, f.UsageError("--rate is required")
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, f.ValueError("--rate: invalid number %q", s)
	}
	return r, nil
}

// UsageError is a mistake in the shape of the command line (a flag that
// does not exist, an argument missing or extra), shown with the usage: the
// operator needs the list to correct it.
func (f *Flags) UsageError(format string, a ...any) error {
	return &UsageError{Cmd: f.Cmd, Msg: fmt.Sprintf(format, a...), Usage: f.Usage()}
}

// ValueError is a usage error in a value (exit 2) whose message names the
// flag and the rule: a hint to -h follows, not the whole usage, so the
// message stays on the operator's screen.
func (f *Flags) ValueError(format string, a ...any) error {
	return &UsageError{Cmd: f.Cmd, Msg: fmt.Sprintf(format, a...)}
}

// One returns the single positional argument, named name in the errors
// when it is missing or followed by another.
func (f *Flags) One(pos []string, name string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", f.UsageError("%s is required", name)
	case len(pos) > 1:
		return "", f.UsageError("unexpected argument %q (one %s at a time)", pos[1], name)
	}
	return pos[0], nil
}

// NoArgs fails if any positional argument was given.
func (f *Flags) NoArgs(pos []string) error {
	if len(pos) > 0 {
		return f.UsageError("unexpected argument %q", pos[0])
	}
	return nil
}

// List is a repeatable flag; each value may hold several items
// separated by sep (and, always, by whitespace).
type List struct {
	Items []string
	Sep   string
}

func (l *List) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.Items, l.Sep)
}

func (l *List) Set(v string) error {
	for _, field := range strings.Fields(v) {
		parts := []string{field}
		if l.Sep != "" {
			parts = strings.Split(field, l.Sep)
		}
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				l.Items = append(l.Items, p)
			}
		}
	}
	return nil
}

// PositiveDuration is a flag.Value holding a duration > 0 (a timeout of
// 0 or less would mean none, silently).
type PositiveDuration time.Duration

func (d *PositiveDuration) String() string { return time.Duration(*d).String() }

func (d *PositiveDuration) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not a duration (e.g. 10s, 1m)")
	}
	if v <= 0 {
		return errors.New("must be > 0")
	}
	*d = PositiveDuration(v)
	return nil
}
