package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
)

// ---- pause ----------------------------------------------------------------

func (c *cli) pause(name string, args []string) error {
	f := cmdline.New("pause", "KEY --for DURATION [flags]",
		"Pauses KEY for the whole fleet: no event of KEY is admitted anywhere until\nthe pause ends, as when a provider answered 429 with Retry-After. A longer\npause already in force stays; the pause in force is printed.\n\n"+
			"KEY needs no limit, deliberately: pauses and limits are kept apart, so a\n"+
			"pause may come before the limit (or hold a key that has none, whose callers\n"+
			"check the gate themselves); Wait and Reserve of a limited key wait it out.")
	o := addAdminFlags(f)
	d := f.Duration("for", 0, "how long, a `DURATION` like 15s (required, at most 24h)")
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	if *d <= 0 || *d > fsm.MaxPause {
		return f.ValueError("--for must be a duration in (0, %v], like 15s", fsm.MaxPause)
	}
	ctx, cancel := o.context(c)
	defer cancel()
	rem, err := o.client().Pause(ctx, key, *d)
	if err != nil {
		return fmt.Errorf("pause %q: %w", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: paused for %v\n", key, rem.Round(time.Millisecond))
	return nil
}

// ---- slots ----------------------------------------------------------------

const slotsUsage = `Usage: raftpace slots set KEY --max N [flags]
       raftpace slots delete KEY [flags]
       raftpace slots list [--json] [flags]

Sets, removes or lists fleet-wide concurrency caps, through the agent at
--addr: at most N slots of KEY are held at once across the whole fleet
(AcquireSlot in the client library; the HTTP transport takes one per
request). 'raftpace status' shows the slots in use.
`

func (c *cli) slots(name string, args []string) error {
	sub, help := findSubcommand(args)
	if help {
		fmt.Fprint(c.stdout, slotsUsage)
		return cmdline.ErrHelp
	}
	if sub < 0 || args[sub] == "--" {
		return &cmdline.UsageError{Cmd: "slots", Msg: "missing subcommand: set, delete or list", Usage: slotsUsage}
	}
	rest := append(slices.Clone(args[:sub]), args[sub+1:]...)
	switch args[sub] {
	case "set":
		return c.slotsSet(rest)
	case "delete", "rm":
		return c.slotsDelete(rest)
	case "list", "ls":
		return c.slotsList(rest)
	case "help":
		fmt.Fprint(c.stdout, slotsUsage)
		return cmdline.ErrHelp
	}
	return &cmdline.UsageError{Cmd: "slots", Msg: fmt.Sprintf("unknown subcommand %q: want set, delete or list", args[sub]), Usage: slotsUsage}
}

func (c *cli) slotsSet(args []string) error {
	f := cmdline.New("slots set", "KEY --max N [flags]", "Sets KEY's fleet-wide concurrency cap: at most N slots held at once.")
	o := addAdminFlags(f)
	maxS := f.String("max", "", "most slots held at once across the fleet, `N` in 1..1000000 (required)")
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	if *maxS == "" {
		return f.UsageError("--max is required")
	}
	m, err := strconv.Atoi(strings.TrimSpace(*maxS))
	if err != nil || m < 1 || m > fsm.MaxCap {
		return f.ValueError("--max: %q is not a whole number in 1..%d", *maxS, fsm.MaxCap)
	}
	ctx, cancel := o.context(c)
	defer cancel()
	if err := o.client().SetCap(ctx, key, m); err != nil {
		return fmt.Errorf("slots set %q: %w", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: at most %d at once\n", key, m)
	return nil
}

func (c *cli) slotsDelete(args []string) error {
	f := cmdline.New("slots delete", "KEY [flags]", "Removes KEY's concurrency cap (slots held stay until released or expired).")
	o := addAdminFlags(f)
	key, err := c.parseKey(f, args)
	if err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	if err := o.client().DeleteCap(ctx, key); err != nil {
		return fmt.Errorf("slots delete %q: %w", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: no cap\n", key)
	return nil
}

func (c *cli) slotsList(args []string) error {
	f := cmdline.New("slots list", "[--json] [flags]", "Prints every cap and the slots in use, sorted by key.")
	o := addAdminFlags(f)
	asJSON := f.Bool("json", false, `print the caps as in the status document: [{"key":..,"max":..,"in_use":..}]`)
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	ctx, cancel := o.context(c)
	defer cancel()
	st, err := o.client().Status(ctx)
	if err != nil {
		return fmt.Errorf("slots list: %w", err)
	}
	if *asJSON {
		return render.JSON(c.stdout, st.Caps)
	}
	if len(st.Caps) == 0 {
		fmt.Fprintln(c.stdout, "(no caps set: raftpace slots set KEY --max N)")
		return nil
	}
	render.Caps(c.stdout, st.Caps)
	return nil
}
