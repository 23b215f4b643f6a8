package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/policy"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// adminOpts are the flags shared by the commands that call an agent.
type adminOpts struct {
	addr      string
	timeout   time.Duration
	tokenFile string
	getenv    func(string) (string, bool) // the command's environment, set by context
}

func addAdminFlags(f *cmdline.Flags) *adminOpts {
	o := &adminOpts{}
	f.StringVar(&o.addr, "addr", "127.0.0.1:7402", "`HOST:PORT` of the agent's admin API (its --http)")
	o.timeout = 10 * time.Second
	f.Var((*cmdline.PositiveDuration)(&o.timeout), "timeout", "give up after `DURATION` (> 0)")
	f.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding the agent's admin token (its --http-token-file);\nwithout it, the token is read from RAFTPACE_TOKEN if set")
	f.WithEnv("addr", "timeout", "token-file")
	return o
}

// client calls the agent at --addr with the token of --token-file, or else
// of RAFTPACE_TOKEN.
func (o *adminOpts) client() *admin.Client {
	cl := &admin.Client{Addr: o.addr, TokenFile: o.tokenFile}
	if o.tokenFile == "" {
		getenv := o.getenv
		if getenv == nil {
			getenv = os.LookupEnv
		}
		cl.Token, _ = getenv("RAFTPACE_TOKEN")
		cl.Token = strings.TrimSpace(cl.Token)
	}
	return cl
}

func (o *adminOpts) context(c *cli) (context.Context, context.CancelFunc) {
	o.getenv = c.getenv
	return context.WithTimeout(c.ctx, o.timeout) // > 0: cmdline.PositiveDuration
}

// ---- status ---------------------------------------------------------------

func (c *cli) status(name string, args []string) error {
	f := cmdline.New("status", "[--json] [--watch [--interval 2s]] [flags]",
		"Prints the cluster as the agent at --addr sees it: this node, the leader and\n"+
			"term, the members (role, health, and on the leader each member's mode, share\n"+
			"and last contact) and each key's limit, admitted rate over the last 10 s,\n"+
			"pause and slots. --json prints the agent's status document as is. --watch\n"+
			"prints it again every --interval, clearing the screen, until interrupted.")
	o := addAdminFlags(f)
	asJSON := f.Bool("json", false, "print the status document as JSON")
	watch := f.Bool("watch", false, "refresh every --interval until interrupted (Ctrl-C)")
	interval := f.Duration("interval", 2*time.Second, "with --watch: the refresh period (`DURATION`, at least 100ms)")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	if *watch && *interval < 100*time.Millisecond {
		return f.ValueError("--interval %v: must be at least 100ms", *interval)
	}
	if !*watch {
		ctx, cancel := o.context(c)
		defer cancel()
		st, err := o.client().Status(ctx)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		if *asJSON {
			return render.JSON(c.stdout, st)
		}
		render.Status(c.stdout, st)
		return nil
	}
	// --watch: one screen per interval; a failed read is shown and retried
	// (an agent restarting comes back on the next one). SIGINT ends it.
	for {
		ctx, cancel := o.context(c)
		st, err := o.client().Status(ctx)
		cancel()
		if c.ctx.Err() != nil {
			return nil
		}
		var b bytes.Buffer
		switch {
		case *asJSON && err != nil:
			render.JSON(&b, map[string]string{"error": err.Error()})
		case *asJSON:
			render.JSON(&b, st)
		default:
			b.WriteString("\x1b[H\x1b[2J") // cursor home, clear screen
			fmt.Fprintf(&b, "raftpace status --addr %s, every %v (Ctrl-C to stop)   %s\n\n", o.addr, *interval, time.Now().Format("15:04:05"))
			if err != nil {
				fmt.Fprintf(&b, "status: %v\n", err)
			} else {
				render.Status(&b, st)
			}
		}
		if _, err := c.stdout.Write(b.Bytes()); err != nil {
			return err
		}
		if !loop.Sleep(c.ctx, *interval) {
			return nil
		}
	}
}

// ---- limit ----------------------------------------------------------------

const limitUsage = `Usage: raftpace limit set KEY --rate R [--burst B] [--quota N/PERIOD] [--mode enforce|dry-run] [flags]
       raftpace limit get KEY [--json] [flags]
       raftpace limit remaining KEY [--json] [flags]
       raftpace limit list [--json] [flags]
       raftpace limit apply FILE [--dry-run] [flags]

Sets or reads the limit of a key, through the agent at --addr. A limit is a
rate R (events per second across the whole cluster) and a burst B >= 1: in
any window of W seconds the cluster admits at most R*W + B events of the key.

A KEY ending in * is a template: every key that starts with the part before
the * gets its own limit R, B on first use, with no step per key
(limit set 'tenant:*' --rate 5). A key's own limit beats a template, and
the longest matching template wins. Events of a template's keys are counted
under the template in status and metrics; an idle key leaves the leader's
memory after a minute.

A limit may also carry a quota, --quota N/PERIOD: at most N events in each
calendar window of PERIOD (minute, hour, day or month, in UTC on the leader's
clock), beside its rate. limit remaining reads what is left of it.

A limit set with --mode dry-run is paced as usual but holds nothing back:
every event goes at once, and those the limit had no slot for are counted
(raftpace_reservations_total{outcome="dry_run_over"}), so a new limit can be
watched before it is enforced. Set it again without --mode to enforce it.

limit apply sets every limit and cap of a policy file that differs from the
cluster's, checking the whole file first (raftpace limit apply -h).
Run 'raftpace limit set -h' for the flags.
`

// boolFlags are the operator subcommands' flags that take no value.
var boolFlags = map[string]bool{"json": true, "h": true, "help": true, "watch": true, "dry-run": true}

// findSubcommand finds a subcommand among args: flags may come before it
// (limit --addr A set K --rate R), so it is the first argument that is
// neither a flag nor a flag's value. help reports a -h before it; sub is
// -1 if there is none.
func findSubcommand(args []string) (sub int, help bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return i, false
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return -1, true
		}
		if !hasValue && !boolFlags[name] {
			i++ // skip the flag's value
		}
	}
	return -1, false
}

func (c *cli) limit(name string, args []string) error {
	sub, help := findSubcommand(args)
	if help {
		fmt.Fprint(c.stdout, limitUsage)
		return cmdline.ErrHelp
	}
	if sub < 0 || args[sub] == "--" {
		return &cmdline.UsageError{Cmd: "limit", Msg: "missing subcommand: set, get, list, remaining or apply", Usage: limitUsage}
	}
	rest := append(slices.Clone(args[:sub]), args[sub+1:]...)
	switch args[sub] {
	case "set":
		return c.limitSet(rest)
	case "get":
		return c.limitGet(rest)
	case "list", "ls":
		return c.limitList(rest)
	case "remaining":
		return c.limitRemaining(rest)
	case "apply":
		return c.limitApply(rest)
	case "help":
		fmt.Fprint(c.stdout, limitUsage)
		return cmdline.ErrHelp
	}
	return &cmdline.UsageError{Cmd: "limit", Msg: fmt.Sprintf("unknown subcommand %q: want set, get, list, remaining or apply", args[sub]), Usage: limitUsage}
}

// parseKey parses a command's flags and returns its single positional KEY.
func (c *cli) parseKey(f *cmdline.Flags, args []string) (string, error) {
	pos, err := c.parse(f, args)
	if err != nil {
		return "", err
	}
	return oneKey(f, pos)
}

// oneKey returns the single positional KEY.
func oneKey(f *cmdline.Flags, pos []string) (string, error) {
	key, err := f.One(pos, "KEY")
	if err != nil {
		return "", err
	}
	// Checked here, as the cluster would, so a mistyped key is a usage
	// error (exit 2) and a long one is quoted once, cut short.
	if err := fsm.ValidateKey(key); err != nil {
		return "", f.ValueError("KEY: %s", strings.TrimPrefix(err.Error(), "fsm: "))
	}
	return key, nil
}

// checkLimit refuses, as a usage error naming the flags, a limit the
// cluster would refuse: every rule it breaks at once.
func checkLimit(f *cmdline.Flags, lim fsm.Limit) error {
	problems := append(lim.Explain("--rate", "--burst"), lim.ExplainQuota("--quota")...)
	if len(problems) == 0 {
		if err := fsm.CheckMinRate(lim.Rate); err != nil {
			problems = append(problems, "--"+err.Error())
		}
	}
	if len(problems) > 0 {
		return f.ValueError("%s", strings.Join(problems, "; "))
	}
	return nil
}

func (c *cli) limitSet(args []string) error {
	f := cmdline.New("limit set", "KEY --rate R [--burst B] [--mode enforce|dry-run] [flags]",
		"Sets KEY's limit for the whole cluster: at most R events per second, with\nbursts of up to B. It returns once the limit is committed.\n\n"+
			"KEY is 1 to 256 bytes of UTF-8 with no whitespace, control or invisible\n"+
			"characters. A KEY ending in * is a template: every key under it gets its own\n"+
			"limit R, B on first use (the longest template wins, a key's own limit beats\n"+
			"it). A KEY starting with '-' goes last, after --: limit set --rate 5 -- -key.\n"+
			"R is at least 1/1800 (one event per 30 minutes): no slower key could be granted.\n\n"+
			"--mode dry-run admits every event of KEY at once and counts those the limit\n"+
			"had no slot for (metric raftpace_reservations_total, outcome dry_run_over):\n"+
			"a limit to watch before enforcing it. Each limit set gives the mode anew,\n"+
			"so a later limit set without --mode enforces the limit.")
	o := addAdminFlags(f)
	rate := f.String("rate", "", "events per second across the cluster, 1/1800 <= `R` <= 1e9 (required)")
	burst := f.String("burst", "1", "events allowed at once after a quiet spell, `B` >= 1")
	mode := f.String("mode", "enforce", "`MODE`: enforce (hold events to the limit) or dry-run (admit everything,\ncount what it would hold back)")
	quota := f.String("quota", "", "also at most N events per calendar window (UTC): `N/PERIOD`, PERIOD\nminute, hour, day or month, as 100000/day (none by default)")
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	r, err := f.Rate(*rate)
	if err != nil {
		return err
	}
	b, err := strconv.Atoi(strings.TrimSpace(*burst))
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return f.ValueError("--burst: invalid integer %q", *burst)
	}
	lim := fsm.Limit{Rate: r, Burst: b, DryRun: *mode == policy.ModeDryRun}
	if *quota != "" {
		if lim.Quota, lim.Per, err = fsm.ParseQuota(*quota); err != nil {
			return f.ValueError("--%s", strings.TrimPrefix(err.Error(), "invalid limit: "))
		}
	}
	if *mode != policy.ModeEnforce && *mode != policy.ModeDryRun {
		return f.ValueError("--mode %q: must be enforce or dry-run", *mode)
	}
	if err := checkLimit(f, lim); err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	if err := o.client().SetLimit(ctx, key, lim); err != nil {
		return fmt.Errorf("limit set %q: %w", key, err)
	}
	done := fmt.Sprintf("%s: rate %s/s, burst %d", key, render.Rate(r), b)
	if lim.Quota != 0 {
		done += ", quota " + lim.FormatQuota() + " (UTC windows)"
	}
	if lim.DryRun {
		done += ", dry run: admits everything, counts what it would hold back"
	}
	fmt.Fprintln(c.stdout, done)
	return nil
}

func (c *cli) limitGet(args []string) error {
	f := cmdline.New("limit get", "KEY [--json] [flags]", "Prints KEY's limit.")
	o := addAdminFlags(f)
	asJSON := f.Bool("json", false, `print {"key":..,"rate":..,"burst":..}`)
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	lim, err := o.client().Limit(ctx, key)
	if err != nil {
		if errors.Is(err, raftpace.ErrUnknownKey) {
			return fmt.Errorf("limit get %q: unknown key: no limit is set for it (set one with: raftpace limit set %s --rate R)", key, key)
		}
		return fmt.Errorf("limit get %q: %w", key, err)
	}
	if *asJSON {
		return render.JSON(c.stdout, admin.KeyLimit{Key: key, Limit: admin.LimitOf(lim)})
	}
	render.Limits(c.stdout, map[string]fsm.Limit{key: lim})
	return nil
}

func (c *cli) limitRemaining(args []string) error {
	f := cmdline.New("limit remaining", "KEY [--json] [flags]", "Prints what KEY's limit has left, as the leader counts it: the events its rate\nwould admit at once, and for a quota what is used and left of the window.")
	o := addAdminFlags(f)
	asJSON := f.Bool("json", false, `print {"key":..,"tokens":..,"quota":..,"left":..,"reset":..}`)
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	r, err := o.client().Remaining(ctx, key)
	if err != nil {
		return fmt.Errorf("limit remaining %q: %w", key, err)
	}
	if *asJSON {
		return render.JSON(c.stdout, r)
	}
	fmt.Fprintf(c.stdout, "%s: %d of a burst of %d at once\n", key, r.Tokens, r.Burst)
	if r.Quota != "" {
		fmt.Fprintf(c.stdout, "quota %s: %d used, %d left in [%s, %s)\n", r.Quota, *r.Used, *r.Left, r.WindowStart, r.Reset)
	}
	return nil
}

func (c *cli) limitList(args []string) error {
	f := cmdline.New("limit list", "[--json] [flags]", "Prints every limit, sorted by key.")
	o := addAdminFlags(f)
	asJSON := f.Bool("json", false, `print {"limits":{"KEY":{"rate":..,"burst":..},...}}`)
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	lims, err := o.client().Limits(ctx)
	if err != nil {
		return fmt.Errorf("limit list: %w", err)
	}
	if *asJSON {
		resp := admin.LimitsResponse{Limits: map[string]admin.Limit{}}
		for k, l := range lims {
			resp.Limits[k] = admin.LimitOf(l)
		}
		return render.JSON(c.stdout, resp)
	}
	if len(lims) == 0 {
		fmt.Fprintln(c.stdout, "(no limits set: raftpace limit set KEY --rate R)")
		return nil
	}
	render.Limits(c.stdout, lims)
	return nil
}

// ---- join and leave -------------------------------------------------------

func (c *cli) join(name string, args []string) error {
	f := cmdline.New("join", "ADDR[,ADDR...] [flags]",
		"Tells the agent at --addr to contact cluster members at their gossip\naddresses (their --gossip-bind or --gossip-advertise); the cluster's leader\nthen adds it. Equivalent to starting the agent with --join.")
	o := addAdminFlags(f)
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	var addrs cmdline.List
	addrs.Sep = ","
	for _, p := range pos {
		_ = addrs.Set(p)
	}
	if len(addrs.Items) == 0 {
		return f.UsageError("at least one gossip ADDR (host:port) is required")
	}
	ctx, cancel := o.context(c)
	defer cancel()
	count, err := o.client().Join(ctx, addrs.Items)
	var ae *admin.Error
	if errors.As(err, &ae) {
		return err // the agent's answer names the join and the addresses
	}
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	fmt.Fprintf(c.stdout, "joined: %d of %d address(es) answered\n", count, len(addrs.Items))
	return nil
}

func (c *cli) leave(name string, args []string) error {
	f := cmdline.New("leave", "[flags]",
		"Makes the agent at --addr leave the cluster gracefully (it hands over\nleadership if it leads, and is removed from raft and gossip), then exit.\nReturns once the node has left and, up to --timeout, the agent has stopped.\nIf the leave fails the agent keeps running as a member.")
	o := addAdminFlags(f)
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	cl := o.client()
	st, err := cl.Status(ctx)
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	if err := cl.Leave(ctx); err != nil {
		return fmt.Errorf("leave: %s did not leave: %w", st.ID, err)
	}
	fmt.Fprintf(c.stdout, "%s has left the cluster\n", st.ID)
	// The agent exits once its node has left: wait for its API to go away.
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := cl.Status(pctx)
		pcancel()
		var ue *admin.UnreachableError
		if errors.As(err, &ue) && !ue.Timeout {
			fmt.Fprintf(c.stdout, "%s has stopped\n", st.ID)
			return nil
		}
		if !loop.Sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("leave: %s left the cluster but its agent was still running after %v", st.ID, o.timeout)
		}
	}
}

// ---- version --------------------------------------------------------------

func (c *cli) version(name string, args []string) error {
	f := cmdline.New("version", "", "Prints the version of this binary.")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	v := version
	var rev string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
		}
	}
	fmt.Fprintf(c.stdout, "raftpace %s", v)
	if rev != "" {
		fmt.Fprintf(c.stdout, " (%s)", rev)
	}
	fmt.Fprintf(c.stdout, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
