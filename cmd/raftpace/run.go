package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

const usageText = `raftpace is a distributed rate limiter: every worker process embeds a node,
the nodes form a raft group, and the leader paces each key so that the
whole fleet shares one rate.

Usage:
  raftpace COMMAND [flags] [args]

Daemon:
  agent     run a node (and, for tests and demos, a load generator)
  demo      run a 3-node cluster in this process and watch it hold a limit

Operator (talks to an agent's admin API at --addr, default 127.0.0.1:7402):
  status    show the cluster as the agent sees it: leader, members, limits
  limit     set, get or list limits: limit set KEY --rate R [--burst B]
  pause     pause a key fleet-wide, as after a 429: pause KEY --for 15s
  slots     set, delete or list concurrency caps: slots set KEY --max N
  join      tell the agent to join cluster members at their gossip addresses
  leave     make the agent leave the cluster and exit

Tools:
  check     check timeline files against a limit's ceiling R*W+B
  tls       secure a cluster: tls init (CA, gossip key), tls node NAME (certificate)
  bench     raftpace side by side with Postgres, Redis, x/time/rate and
            gubernator on this machine: latency, throughput, ceilings
  version   print the version
  help      print help: raftpace help COMMAND, or raftpace COMMAND -h

Quick start:
  raftpace demo
  raftpace agent --data-dir /tmp/rp1 --bootstrap-expect 1 &
  raftpace limit set google-images --rate 20 --burst 5

Every agent flag has a RAFTPACE_* environment equivalent (--data-dir:
RAFTPACE_DATA_DIR); a flag on the command line wins, and an empty variable
counts as unset. Operator commands read RAFTPACE_ADDR and RAFTPACE_TIMEOUT.
Flags may come after positional arguments; put -- before a key that starts
with '-'.

Exit status: 0 success; 1 error, or a check or demo that found a window over
the ceiling; 2 usage error.
`

// command is one subcommand.
type command struct {
	name string
	run  func(c *cli, name string, args []string) error
}

var commands = []command{
	{"agent", (*cli).agent},
	{"demo", (*cli).demo},
	{"status", (*cli).status},
	{"limit", (*cli).limit},
	{"pause", (*cli).pause},
	{"slots", (*cli).slots},
	{"join", (*cli).join},
	{"leave", (*cli).leave},
	{"check", (*cli).check},
	{"tls", (*cli).tls},
	{"bench", (*cli).bench},
	{"version", (*cli).version},
	// Not listed in the help: the worker process raftpace bench starts.
	{"bench-worker", (*cli).benchWorker},
}

// cli carries what every command needs; tests build one with a fake
// environment.
type cli struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) (string, bool)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: os.LookupEnv}
	return c.main(args)
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errHelp: help was asked for and printed; exit 0.
var errHelp = errors.New("help requested")

// usageError is a command-line mistake: exit 2. Its usage text is printed
// after the message.
type usageError struct {
	msg   string
	usage string // the command's usage, or "" for a hint line
	cmd   string
}

func (e *usageError) Error() string { return e.msg }

// exitCode ends the run with a status and no further message (the command
// has already said why).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (c *cli) main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usageText)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	var err error
	switch name {
	case "help", "-h", "-help", "--help":
		err = c.help(rest)
	default:
		cmd, ok := findCommand(name)
		if !ok {
			fmt.Fprintf(c.stderr, "raftpace: unknown command %q\nRun 'raftpace help' for the list of commands.\n", name)
			return exitUsage
		}
		err = cmd.run(c, name, rest)
	}
	return c.report(err)
}

func findCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(cmd command) bool { return cmd.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// report prints err and returns the exit status for it.
func (c *cli) report(err error) int {
	var ue *usageError
	var code exitCode
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "raftpace %s: %s\n", ue.cmd, ue.msg)
		if ue.usage != "" {
			fmt.Fprintf(c.stderr, "\n%s", ue.usage)
		} else {
			fmt.Fprintf(c.stderr, "Run 'raftpace %s -h' for usage.\n", ue.cmd)
		}
		return exitUsage
	default:
		msg := err.Error()
		// Multi-line errors (every problem of a configuration) are indented.
		msg = strings.ReplaceAll(msg, "\n", "\n  ")
		fmt.Fprintf(c.stderr, "raftpace: %s\n", msg)
		return exitError
	}
}

func (c *cli) help(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usageText)
		return nil
	}
	cmd, ok := findCommand(args[0])
	if !ok {
		return &usageError{cmd: "help", msg: fmt.Sprintf("unknown command %q", args[0]), usage: usageText}
	}
	return cmd.run(c, cmd.name, append(slices.Clone(args[1:]), "-h"))
}

// flags is a FlagSet with a usage text, environment equivalents and
// support for flags after positional arguments.
type flags struct {
	*flag.FlagSet
	cmd      string // "limit set"
	synopsis string // "KEY --rate R [--burst B]"
	about    string // paragraphs after the synopsis
	env      map[string]string
}

func newFlags(cmd, synopsis, about string) *flags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, cmd: cmd, synopsis: synopsis, about: about, env: map[string]string{}}
}

// withEnv gives the named flags their RAFTPACE_* equivalents.
func (f *flags) withEnv(names ...string) {
	for _, n := range names {
		f.env[n] = envName(n)
	}
}

func envName(flagName string) string {
	return "RAFTPACE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// usage renders the command's help: synopsis, description, flags.
func (f *flags) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: raftpace %s %s\n", f.cmd, f.synopsis)
	if f.about != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(f.about, "\n"))
	}
	first := true
	f.VisitAll(func(fl *flag.Flag) {
		if first {
			b.WriteString("\nFlags:\n")
			first = false
		}
		typ, text := flag.UnquoteUsage(fl)
		if typ == "value" {
			typ = ""
		}
		fmt.Fprintf(&b, "  --%s", fl.Name)
		if typ != "" {
			fmt.Fprintf(&b, " %s", typ)
		}
		b.WriteString("\n")
		for _, line := range strings.Split(text, "\n") {
			fmt.Fprintf(&b, "        %s\n", line)
		}
		var extra []string
		if d := fl.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
			extra = append(extra, fmt.Sprintf("default %s", d))
		}
		if e, ok := f.env[fl.Name]; ok {
			extra = append(extra, "env "+e)
		}
		if len(extra) > 0 {
			fmt.Fprintf(&b, "        (%s)\n", strings.Join(extra, "; "))
		}
	})
	return b.String()
}

// parse parses args, allowing flags after positional arguments, then fills
// every flag not given on the command line from its environment variable.
// It returns the positional arguments. -h prints the usage to stdout and
// returns errHelp.
func (c *cli) parse(f *flags, args []string) ([]string, error) {
	var pos []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, f.usage())
			return nil, errHelp
		}
		if err != nil {
			return nil, f.usageError("%s", flagMessage(err, args))
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...) // everything after -- is positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	names := make([]string, 0, len(f.env))
	for n := range f.env {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v, ok := c.getenv(f.env[n])
		if set[n] || !ok || v == "" {
			continue
		}
		if err := f.Set(n, v); err != nil {
			return nil, f.usageError("%s=%q: %v", f.env[n], v, err)
		}
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

// rate parses a required --rate value. Out of range values come back as
// +-Inf, 0 or the largest numbers, and limit validation then names the rule
// they break; only text that is no number at all is refused here.
func (f *flags) rate(s string) (float64, error) {
	if s == "" {
		return 0, f.usageError("--rate is required")
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, f.usageError("--rate: invalid number %q", s)
	}
	return r, nil
}

func (f *flags) usageError(format string, a ...any) error {
	return &usageError{cmd: f.cmd, msg: fmt.Sprintf(format, a...), usage: f.usage()}
}

// noArgs fails if any positional argument was given.
func (f *flags) noArgs(pos []string) error {
	if len(pos) > 0 {
		return f.usageError("unexpected argument %q", pos[0])
	}
	return nil
}

// listFlag is a repeatable flag; each value may hold several items
// separated by sep (and, always, by whitespace).
type listFlag struct {
	items []string
	sep   string
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.items, l.sep)
}

func (l *listFlag) Set(v string) error {
	for _, field := range strings.Fields(v) {
		parts := []string{field}
		if l.sep != "" {
			parts = strings.Split(field, l.sep)
		}
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				l.items = append(l.items, p)
			}
		}
	}
	return nil
}
