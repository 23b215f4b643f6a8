// Package demo is `raftpace demo`: a cluster of raftpace nodes inside
// this process (loopback, free ports, mutual TLS with a throwaway CA,
// encrypted gossip, data in a temporary directory removed at the end),
// one limit, and more load on every node than the limit allows. It prints
// each second's admitted rate per node, optionally kills the leader and
// restarts it (chaos), and at the end checks every admitted event against
// the ceiling R*W+B+R*UseGrace over Windows and prints a verdict. It
// promises that Run reports ok only when no window was over the ceiling,
// and that every node it started is closed and its directory removed when
// Run returns. The flags and their checks are the command's; its messages
// name the demo's flags where the operator must act (--timeline).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/certs"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
)

// Windows are the windows the verdict checks.
var Windows = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// With Chaos: the default duration, the shortest allowed, the longest
// the leader stays down, the share of the rate a recovery must reach (in
// 1-second windows) and how long a restart retries node.New while the
// killed node's ports are released.
const (
	ChaosDuration    = 30 * time.Second
	ChaosMinDuration = 6 * time.Second
	chaosDown        = 5 // seconds
	recoveredShare   = 0.9
	restartRetry     = 5 * time.Second
)

// UseGrace is the nodes' UseGrace, the delta of the ceiling: a grant is
// used at most this long after the time the leader meant it for.
const UseGrace = 50 * time.Millisecond

// Config is one run of the demo.
type Config struct {
	Rate        float64       // the limit's rate, events/s across the cluster
	Burst       int           // the limit's burst
	Nodes       int           // nodes in the cluster
	Duration    time.Duration // how long the load runs
	Concurrency int           // load goroutines per node
	Key         string        // the limit's key
	Timeline    string        // also write the admitted events to this file ("": don't)
	Verbose     bool          // the nodes' logs (info level) to Run's errOut
	Chaos       bool          // kill the leader at about 1/3 of the run, restart it later
}

// Run runs the demo: it prints to out what it does and sees, each
// second's line and a verdict; the nodes' logs go to errOut with Verbose.
// ok is false when a window was over the ceiling. ctx ending stops the run
// early (its verdict covers the events until then).
func Run(ctx context.Context, d Config, out, errOut io.Writer) (ok bool, err error) {
	r := &runner{ctx: ctx, out: out}
	fmt.Fprintf(out, "raftpace demo: %d raftpace nodes in this process, one limit shared by all.\n", d.Nodes)
	fmt.Fprintf(out, "Every node runs %d workers calling Wait(%q) as fast as they are let through,\n", d.Concurrency, d.Key)
	fmt.Fprintf(out, "so demand is far above the limit; the raft leader paces the whole cluster at\n")
	fmt.Fprintf(out, "%s/s (burst %d): no window of W seconds may admit more than %s*W+%d events\n",
		formatRate(d.Rate), d.Burst, formatRate(d.Rate), d.Burst)
	fmt.Fprintf(out, "(+%s*%v for the delay between a grant and its use: R*W+B+R*delta).\n",
		formatRate(d.Rate), UseGrace)
	fmt.Fprintf(out, "Each second: events admitted per node over the last second, and their total.\n")
	var chaos *chaosPlan
	if d.Chaos {
		chaos = newChaos(d.Duration)
		fmt.Fprintf(out, "CHAOS: at t=%ds the leader is killed (a crash: its load stops too), at t=%ds it\n", chaos.killSec, chaos.restartSec)
		fmt.Fprintf(out, "restarts with the same id, data dir and addresses. While it is down the new\n")
		fmt.Fprintf(out, "leader keeps the dead node's 1/%d of the rate for it (it may be pacing alone\n", d.Nodes)
		fmt.Fprintf(out, "in fallback, for all the others know), so expect about %d/%d of the rate.\n", d.Nodes-1, d.Nodes)
	}
	fmt.Fprintf(out, "Nodes use mutual TLS (a throwaway CA made for this run) and encrypted gossip.\n")
	fmt.Fprintf(out, "Runs for %v; Ctrl-C stops it early.\n\n", d.Duration)

	logger := slog.New(slog.DiscardHandler)
	if d.Verbose {
		logger = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	dir, err := os.MkdirTemp("", "raftpace-demo-*")
	if err != nil {
		return false, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)

	timing := node.FastTiming()
	if d.Chaos {
		timing = node.LANTiming()
	}
	began := time.Now()
	fmt.Fprintf(out, "starting %d nodes... ", d.Nodes)
	tlsDir := filepath.Join(dir, "tls")
	var names []string
	for i := range d.Nodes {
		names = append(names, nodeID(i))
	}
	if _, err := certs.WriteThrowaway(tlsDir, names); err != nil {
		fmt.Fprintln(out)
		return false, fmt.Errorf("demo: making a throwaway CA: %w", err)
	}
	members, err := startNodes(dir, tlsDir, d.Nodes, timing, logger)
	defer func() {
		// Close the live nodes; a killed one's Close and a pending
		// restart end before the data dir goes.
		if chaos != nil && chaos.closed != nil {
			<-chaos.closed
		}
		if chaos != nil && chaos.restarting {
			if r := <-chaos.restarted; r.n != nil {
				r.n.Close()
			}
		}
		closeNodes(liveNodes(members))
	}()
	if err != nil {
		fmt.Fprintln(out)
		return false, fmt.Errorf("demo: %w", err)
	}
	nodes := liveNodes(members)

	// The cluster is ready when every node knows a leader that grants.
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var leader string
	for _, n := range nodes {
		if leader, err = n.WaitForLeader(readyCtx); err != nil {
			fmt.Fprintln(out)
			if ctx.Err() != nil {
				return false, errors.New("demo: interrupted")
			}
			return false, fmt.Errorf("demo: no leader elected: %w", err)
		}
	}
	lim := fsm.Limit{Rate: d.Rate, Burst: d.Burst}
	if err := nodes[0].SetLimit(readyCtx, d.Key, lim); err != nil {
		fmt.Fprintln(out)
		if ctx.Err() != nil {
			return false, errors.New("demo: interrupted")
		}
		return false, fmt.Errorf("demo: setting the limit: %w", err)
	}
	// Let every node see the limit before load starts, so that no worker
	// begins by waiting for it.
	for _, n := range nodes {
		for {
			if _, err := n.Limit(readyCtx, d.Key); err == nil {
				break
			}
			if !loop.Sleep(readyCtx, 10*time.Millisecond) {
				fmt.Fprintln(out)
				return false, errors.New("demo: interrupted")
			}
		}
	}
	fmt.Fprintf(out, "leader %s elected, limit %q set to %s/s burst %d (%.1fs)\n\n",
		leader, d.Key, formatRate(d.Rate), d.Burst, time.Since(began).Seconds())

	// Load on every node.
	store := &eventStore{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	start := time.Now()
	for _, m := range members {
		m.rec = &recorder{node: m.id(), store: store}
		m.startLoad(loadCtx, d, logger)
	}
	stopAll := func() {
		stopLoad()
		for _, m := range members {
			m.wait()
		}
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(d.Duration)
	defer end.Stop()
	prev := make([]uint64, len(members))
	interrupted := false
	prevAt := start
	sec := 0
loop:
	for {
		select {
		case now := <-tick.C:
			sec++
			printSecond(out, now.Sub(start), now.Sub(prevAt), members, prev, d.Rate, d.Chaos)
			prevAt = now
			if chaos != nil {
				chaos.step(r, sec, members)
			}
		case r := <-chaosRestarted(chaos):
			chaos.restarting = false
			at := formatSecs(time.Since(start))
			if r.err != nil {
				fmt.Fprintf(out, "t=%-3s  CHAOS: could not restart %s: %v\n", at, chaos.victim.id(), r.err)
				continue
			}
			chaos.restartedAt = time.Now()
			chaos.victim.n = r.n
			chaos.victim.startLoad(loadCtx, d, logger)
			how := "same id, data dir and addresses"
			if d.Nodes > 1 {
				how += "; joining the others"
			}
			fmt.Fprintf(out, "t=%-3s  CHAOS: restarted %s (%s)\n", at, chaos.victim.id(), how)
		case <-end.C:
			break loop
		case <-ctx.Done():
			interrupted = true
			break loop
		}
	}
	stopAll()
	elapsed := time.Since(start)
	if interrupted {
		fmt.Fprintf(out, "\ninterrupted at t=%.1fs\n", elapsed.Seconds())
	}

	events := store.all()
	if d.Timeline != "" {
		if err := writeTimeline(d.Timeline, events); err != nil {
			return false, fmt.Errorf("demo: --timeline: %w", err)
		}
	}
	rep := timeline.Check(events, d.Key, timeline.Spec{
		Limit:   timeline.Limit{Rate: d.Rate, Burst: d.Burst},
		Windows: Windows,
		Delta:   UseGrace,
	})
	fmt.Fprintln(out)
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.id()
	}
	printVerdict(out, rep, elapsed, ids)
	if chaos != nil {
		printRecovery(out, chaos, events, start, start.Add(elapsed), d.Rate, d.Nodes)
	}
	return rep.OK(), nil
}

// runner is what a run's steps share.
type runner struct {
	ctx context.Context
	out io.Writer
}

// chaosRestarted is the channel a restart reports on; nil (never ready)
// without Chaos.
func chaosRestarted(ch *chaosPlan) <-chan restart {
	if ch == nil {
		return nil
	}
	return ch.restarted
}

func formatBound(b float64) string { return formatRate(math.Round(b*100) / 100) }

// writeTimeline writes events to path as a timeline file.
func writeTimeline(path string, events []timeline.Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := timeline.WriteEvents(f, events); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

// About is `raftpace demo -h`'s description of what the demo does.
const About = `Starts a cluster of --nodes nodes inside this process (127.0.0.1, free
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
