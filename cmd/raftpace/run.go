package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
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
  limit     set, get, list or apply limits: limit set KEY --rate R [--burst B]
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
counts as unset. Operator commands read RAFTPACE_ADDR, RAFTPACE_TIMEOUT and
RAFTPACE_TOKEN (the admin token, or RAFTPACE_TOKEN_FILE naming its file).
Flags may come after positional arguments. A key that starts with '-' goes
last, after every flag and a --: raftpace limit set --rate 5 -- -key.

Exit status:
  0  success
  1  refused or failed: by the agent (unknown key, no leader in time), or a
     check or demo that found a window over the ceiling
  2  usage error: a wrong command line or agent configuration (flags or
     RAFTPACE_* variables), or a value the cluster would refuse (checked
     before anything is sent)
  3  no agent answered at --addr: nothing was changed; safe to retry
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
//
// 0: done. 1: the agent (or the command's own work) refused or failed:
// an unknown key, no leader in time, a port already taken, a check or demo
// that found a window over the ceiling. 2: the command line (or an agent's
// configuration) is wrong, including values the cluster would refuse
// (they are checked before any request). 3: no
// agent answered at --addr: nothing was asked, so a script may retry.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitUnreachable = 3
)

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
	var ue *cmdline.UsageError
	var code exitCode
	switch {
	case err == nil, errors.Is(err, cmdline.ErrHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "raftpace %s: %s\n", ue.Cmd, strings.ReplaceAll(ue.Msg, "\n", "\n  "))
		if ue.Usage != "" {
			fmt.Fprintf(c.stderr, "\n%s", ue.Usage)
		} else {
			fmt.Fprintf(c.stderr, "Run 'raftpace %s -h' for usage.\n", ue.Cmd)
		}
		return exitUsage
	default:
		msg := operatorMessage(err)
		// Multi-line errors (every problem of a configuration) are indented.
		msg = strings.ReplaceAll(msg, "\n", "\n  ")
		fmt.Fprintf(c.stderr, "raftpace: %s\n", msg)
		var ce *agent.ConfigError
		switch {
		case errors.Is(err, admin.ErrUnreachable):
			return exitUnreachable
		case errors.As(err, &ce):
			return exitUsage // the agent's flags (or variables) as given
		}
		return exitError
	}
}

// operatorMessage is err's message without the Go package that made a
// part of it ("node: join ...", "starting node: node: transport: ..."):
// an operator needs what failed, not where.
func operatorMessage(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "node: "), ": node: ", ": ")
}

func (c *cli) help(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usageText)
		return nil
	}
	cmd, ok := findCommand(args[0])
	if !ok {
		return &cmdline.UsageError{Cmd: "help", Msg: fmt.Sprintf("unknown command %q", args[0]), Usage: usageText}
	}
	return cmd.run(c, cmd.name, append(slices.Clone(args[1:]), "-h"))
}

// parse reads the command line, then the environment, into f
// (cmdline.Flags.Read); -h prints the usage to stdout.
func (c *cli) parse(f *cmdline.Flags, args []string) ([]string, error) {
	pos, err := f.Read(args, c.getenv)
	if errors.Is(err, cmdline.ErrHelp) {
		fmt.Fprint(c.stdout, f.Usage())
	}
	return pos, err
}
