package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/demo"
	"github.com/raftpace/raftpace/fsm"
)

const demoAbout = `Starts a cluster of --nodes nodes inside this process (127.0.0.1, free
ports, data in a temporary directory removed at the end), sets one limit,
and runs on every node more load than the limit allows: --concurrency
goroutines per node, each calling Wait(KEY) in a loop. Once a second it
prints the events each node admitted over the last second and their total
against the ceiling. After --duration it checks every admitted event
against the ceiling R*W+B+R*delta over windows of 0.5s, 1s, 2s and 5s
(delta, 50ms, is the longest a node may use a grant after the time the
leader meant it for: scheduling delay) and prints a verdict;
the exit status is 1 if any window was over. Ctrl-C stops it early.

With --chaos (default --duration 30s) the nodes use LAN raft timers
(failover in about 1-2s) and the demo kills the raft leader at about a
third of the run (node.Close: a crash as far as the others are concerned;
its load stops, the events it admitted stay counted), then restarts it 5s
later (less in runs shorter than 15s) with the same id, data dir and
addresses, joined to the others, and restarts its load. Each second's line
also names the leader. While the node is down the new leader keeps the
dead node's share of the rate (1/N) for it: a member the leader cannot
reach may be pacing its own callers at its share (fallback), so the
cluster admits about (N-1)/N of the rate until the node is back. At the
end it prints when the cluster admitted at least 90% of the rate again
after the kill and after the restart, as the table shows it: the first
full second at that pace, and how long after the event it ended. The
verdict still covers every event of the run.

The nodes run secured as a production cluster should: raft and RPC over
mutual TLS 1.3 with a CA made for this run (its key is never written;
the certificates and a fresh gossip key live in the temporary directory),
gossip encrypted with that key. See 'raftpace tls -h'.

Needs no configuration, no Postgres and no network beyond loopback.`

func (c *cli) demo(name string, args []string) error {
	f := cmdline.New("demo", "[flags]", demoAbout)
	var d demo.Config
	f.Float64Var(&d.Rate, "rate", 20, "the limit's rate `R`, events per second across the cluster")
	f.IntVar(&d.Burst, "burst", 1, "the limit's burst `B`")
	f.IntVar(&d.Nodes, "nodes", 3, "number of nodes, `N` 1-9")
	f.DurationVar(&d.Duration, "duration", 20*time.Second, "how long the load runs, a `DURATION`")
	f.IntVar(&d.Concurrency, "concurrency", 4, "load goroutines per node, `N` 1-1000")
	f.StringVar(&d.Key, "key", "demo", "the limit's `KEY`")
	f.StringVar(&d.Timeline, "timeline", "", "also write the admitted events to `FILE` (for raftpace check)")
	f.BoolVar(&d.Verbose, "verbose", false, "print the nodes' logs (info level) on stderr")
	f.BoolVar(&d.Chaos, "chaos", false, "kill the leader at about 1/3 of the run and restart it 5s later\n(default --duration 30s)")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	durationSet := false
	f.Visit(func(fl *flag.Flag) { durationSet = durationSet || fl.Name == "duration" })
	if d.Chaos && !durationSet {
		d.Duration = demo.ChaosDuration
	}
	var problems []string
	if err := (fsm.Limit{Rate: d.Rate, Burst: d.Burst}).Validate(); err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if d.Nodes < 1 || d.Nodes > 9 {
		problems = append(problems, fmt.Sprintf("--nodes %d: must be 1-9", d.Nodes))
	}
	if d.Duration <= 0 {
		problems = append(problems, fmt.Sprintf("--duration %v: must be positive", d.Duration))
	} else if d.Chaos && d.Duration < demo.ChaosMinDuration {
		problems = append(problems, fmt.Sprintf("--duration %v: with --chaos must be at least %v", d.Duration, demo.ChaosMinDuration))
	}
	if d.Concurrency < 1 || d.Concurrency > 1000 {
		problems = append(problems, fmt.Sprintf("--concurrency %d: must be 1-1000", d.Concurrency))
	}
	if err := fsm.ValidateKey(d.Key); err != nil {
		problems = append(problems, fmt.Sprintf("--key: %v", err))
	}
	if len(problems) > 0 {
		return f.ValueError("%s", strings.Join(problems, "\n"))
	}
	ok, err := demo.Run(c.ctx, d, c.stdout, c.stderr)
	if err != nil {
		return err
	}
	if !ok {
		return exitCode(exitError)
	}
	return nil
}
