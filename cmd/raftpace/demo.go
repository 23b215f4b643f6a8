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

func (c *cli) demo(name string, args []string) error {
	f := cmdline.New("demo", "[flags]", demo.About)
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
