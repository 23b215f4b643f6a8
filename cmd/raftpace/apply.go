package main

import (
	"fmt"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/policy"
)

// applyInFlight is how many changes `limit apply` has in flight at once:
// each is one raft commit, and the leader batches commits that arrive
// together, so a thousand keys take about a second instead of a thousand
// round trips in a row.
const applyInFlight = 16

func (c *cli) limitApply(args []string) error {
	f := cmdline.New("limit apply", "FILE [--dry-run] [flags]",
		"Sets the limits and caps of a policy file (the format of 'raftpace agent\n"+
			"--policy': {\"limits\":{\"KEY\":{\"rate\":R,\"burst\":B}},\"caps\":{\"KEY\":N}}) across\n"+
			"the cluster, as many 'limit set' and 'slots set' would. The file is checked\n"+
			"first, every problem at once, and nothing is set if it has one. Only keys\n"+
			"whose value differs from the cluster's are set; each change is printed.\n\n"+
			"Apply is idempotent, not atomic: each key commits on its own, so if some fail\n"+
			"(exit 1, each named) the others stay set; run it again to finish. It never\n"+
			"deletes: keys the cluster holds and the file does not name keep their values\n"+
			"(they are counted in the summary). --timeout bounds each request.")
	o := addAdminFlags(f)
	dryRun := f.Bool("dry-run", false, "print what would change and change nothing")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	path, err := f.One(pos, "FILE")
	if err != nil {
		return err
	}
	file, err := policy.Read(path)
	if err != nil {
		return f.ValueError("%v", err)
	}
	ctx, cancel := o.context(c)
	cl := o.client()
	limits, err := cl.Limits(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("limit apply: %w", err)
	}
	caps, err := cl.Caps(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("limit apply: %w", err)
	}
	plan := policy.Diff(file, limits, caps)
	if *dryRun {
		for _, ch := range plan.Changes {
			fmt.Fprintln(c.stdout, ch)
		}
		lead := fmt.Sprintf("dry run: would set %d keys", len(plan.Changes))
		fmt.Fprintf(c.stdout, "%s; nothing was sent\n", plan.Summary(lead))
		return nil
	}

	failed := policy.Apply(c.ctx, cl, plan.Changes, applyInFlight, o.timeout)
	done := 0
	for i, ch := range plan.Changes {
		if failed[i] != nil {
			fmt.Fprintf(c.stderr, "raftpace: limit apply: %s %q: %s\n", ch.Kind(), ch.Key, operatorMessage(failed[i]))
			continue
		}
		fmt.Fprintln(c.stdout, ch)
		done++
	}
	lead := fmt.Sprintf("set %d of %d keys", done, len(plan.Changes))
	if len(plan.Changes) == 0 {
		lead = "nothing to set"
	}
	fmt.Fprintln(c.stdout, plan.Summary(lead))
	if n := len(plan.Changes) - done; n > 0 {
		// Not wrapped: some changes committed, so this is no "nothing was
		// changed" exit 3 even if the agent stopped answering midway.
		return fmt.Errorf("limit apply: %d of %d changes failed (named above); the other %d are set; run it again to finish", n, len(plan.Changes), done)
	}
	return nil
}
