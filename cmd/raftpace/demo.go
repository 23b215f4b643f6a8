package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/certs"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
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
end it prints how long after the kill and after the restart the cluster
took to admit at least 90% of the rate again (1-second windows); the
verdict still covers every event of the run.

The nodes run secured as a production cluster should: raft and RPC over
mutual TLS 1.3 with a CA made for this run (its key is never written;
the certificates and a fresh gossip key live in the temporary directory),
gossip encrypted with that key. See 'raftpace tls -h'.

Needs no configuration, no Postgres and no network beyond loopback.`

// demoWindows are the windows the demo's verdict checks.
var demoWindows = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// With --chaos: the default duration, the shortest allowed, the longest
// the leader stays down, the share of the rate a recovery must reach (in
// 1-second windows) and how long a restart retries node.New while the
// killed node's ports are released.
const (
	demoChaosDuration    = 30 * time.Second
	demoChaosMinDuration = 6 * time.Second
	demoChaosDown        = 5 // seconds
	demoRecoveredShare   = 0.9
	demoRestartRetry     = 5 * time.Second
)

// demoUseGrace is the nodes' UseGrace, the delta of the ceiling: a grant is
// used at most this long after the time the leader meant it for.
const demoUseGrace = 50 * time.Millisecond

type demoConfig struct {
	rate        float64
	burst       int
	nodes       int
	duration    time.Duration
	concurrency int
	key         string
	timeline    string
	verbose     bool
	chaos       bool
}

func (c *cli) demo(name string, args []string) error {
	f := newFlags("demo", "[flags]", demoAbout)
	var d demoConfig
	f.Float64Var(&d.rate, "rate", 20, "the limit's rate `R`, events per second across the cluster")
	f.IntVar(&d.burst, "burst", 1, "the limit's burst `B`")
	f.IntVar(&d.nodes, "nodes", 3, "number of nodes, `N` 1-9")
	f.DurationVar(&d.duration, "duration", 20*time.Second, "how long the load runs, a `DURATION`")
	f.IntVar(&d.concurrency, "concurrency", 4, "load goroutines per node, `N` 1-1000")
	f.StringVar(&d.key, "key", "demo", "the limit's `KEY`")
	f.StringVar(&d.timeline, "timeline", "", "also write the admitted events to `FILE` (for raftpace check)")
	f.BoolVar(&d.verbose, "verbose", false, "print the nodes' logs (info level) on stderr")
	f.BoolVar(&d.chaos, "chaos", false, "kill the leader at about 1/3 of the run and restart it 5s later\n(default --duration 30s)")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.noArgs(pos); err != nil {
		return err
	}
	durationSet := false
	f.Visit(func(fl *flag.Flag) { durationSet = durationSet || fl.Name == "duration" })
	if d.chaos && !durationSet {
		d.duration = demoChaosDuration
	}
	var problems []string
	if err := (fsm.Limit{Rate: d.rate, Burst: d.burst}).Validate(); err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if d.nodes < 1 || d.nodes > 9 {
		problems = append(problems, fmt.Sprintf("--nodes %d: must be 1-9", d.nodes))
	}
	if d.duration <= 0 {
		problems = append(problems, fmt.Sprintf("--duration %v: must be positive", d.duration))
	} else if d.chaos && d.duration < demoChaosMinDuration {
		problems = append(problems, fmt.Sprintf("--duration %v: with --chaos must be at least %v", d.duration, demoChaosMinDuration))
	}
	if d.concurrency < 1 || d.concurrency > 1000 {
		problems = append(problems, fmt.Sprintf("--concurrency %d: must be 1-1000", d.concurrency))
	}
	if err := fsm.ValidateKey(d.key); err != nil {
		problems = append(problems, fmt.Sprintf("--key: %v", err))
	}
	if len(problems) > 0 {
		return f.usageError("%s", strings.Join(problems, "\n"))
	}
	return c.runDemo(d)
}

// demoRecorder keeps every admitted event of one node in memory.
type demoRecorder struct {
	node  string
	count atomic.Uint64
	store *demoStore
}

func (r *demoRecorder) Record(key string, at time.Time) error {
	r.count.Add(1)
	r.store.add(timeline.Event{At: at.UnixNano(), Node: r.node, Key: key})
	return nil
}

type demoStore struct {
	mu     sync.Mutex
	events []timeline.Event
}

func (s *demoStore) add(e timeline.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *demoStore) all() []timeline.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timeline.Event(nil), s.events...)
}

// demoMember is one node of the demo and its load. Only the demo's main
// loop touches it.
type demoMember struct {
	cfg  node.Config // as first started, with the addresses it bound (a restart reuses them)
	n    *node.Node  // nil while killed
	rec  *demoRecorder
	stop context.CancelFunc // ends its load
	wait func()             // waits for its load goroutines to end
}

func (m *demoMember) id() string { return m.cfg.NodeID }

// startLoad starts the member's load: d.concurrency goroutines calling
// Wait(d.key) in a loop on its node, until ctx ends or stop is called.
func (m *demoMember) startLoad(ctx context.Context, d demoConfig, logger *slog.Logger) {
	lctx, cancel := context.WithCancel(ctx)
	m.stop = cancel
	m.wait = loadgen.StartNode(lctx, m.n, []loadgen.Spec{{Key: d.key, Concurrency: d.concurrency}}, "raft", m.rec, logger)
}

// demoChaos is the state of --chaos: when the leader is killed and
// restarted, and what happened.
type demoChaos struct {
	killSec, restartSec int // the seconds (ticks) planned for the kill and the restart
	victim              *demoMember
	killedAt            time.Time
	closed              chan struct{} // closed when the killed node's Close and its load have ended
	restarting          bool
	restarted           chan demoRestart
	restartedAt         time.Time
}

type demoRestart struct {
	n   *node.Node
	err error
}

// newDemoChaos plans the kill at about a third of the run and the restart
// demoChaosDown seconds later, less when the run is short (half of what is
// left after the kill, so the cluster runs a while with the node back).
func newDemoChaos(duration time.Duration) *demoChaos {
	secs := int(duration / time.Second)
	kill := max(1, int(math.Round(duration.Seconds()/3)))
	down := max(1, min(demoChaosDown, (secs-kill)/2))
	return &demoChaos{killSec: kill, restartSec: kill + down, restarted: make(chan demoRestart, 1)}
}

func (c *cli) runDemo(d demoConfig) (err error) {
	out := c.stdout
	fmt.Fprintf(out, "raftpace demo: %d raftpace nodes in this process, one limit shared by all.\n", d.nodes)
	fmt.Fprintf(out, "Every node runs %d workers calling Wait(%q) as fast as they are let through,\n", d.concurrency, d.key)
	fmt.Fprintf(out, "so demand is far above the limit; the raft leader paces the whole cluster at\n")
	fmt.Fprintf(out, "%s/s (burst %d): no window of W seconds may admit more than %s*W+%d events\n",
		render.Rate(d.rate), d.burst, render.Rate(d.rate), d.burst)
	fmt.Fprintf(out, "(+%s*%v for the delay between a grant and its use: R*W+B+R*delta).\n",
		render.Rate(d.rate), demoUseGrace)
	fmt.Fprintf(out, "Each second: events admitted per node over the last second, and their total.\n")
	var chaos *demoChaos
	if d.chaos {
		chaos = newDemoChaos(d.duration)
		fmt.Fprintf(out, "CHAOS: at t=%ds the leader is killed (a crash: its load stops too), at t=%ds it\n", chaos.killSec, chaos.restartSec)
		fmt.Fprintf(out, "restarts with the same id, data dir and addresses. While it is down the new\n")
		fmt.Fprintf(out, "leader keeps the dead node's 1/%d of the rate for it (it may be pacing alone\n", d.nodes)
		fmt.Fprintf(out, "in fallback, for all the others know), so expect about %d/%d of the rate.\n", d.nodes-1, d.nodes)
	}
	fmt.Fprintf(out, "Nodes use mutual TLS (a throwaway CA made for this run) and encrypted gossip.\n")
	fmt.Fprintf(out, "Runs for %v; Ctrl-C stops it early.\n\n", d.duration)

	logger := slog.New(slog.DiscardHandler)
	if d.verbose {
		logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	dir, err := os.MkdirTemp("", "raftpace-demo-*")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)

	timing := node.FastTiming()
	if d.chaos {
		timing = node.LANTiming()
	}
	began := time.Now()
	fmt.Fprintf(out, "starting %d nodes... ", d.nodes)
	tlsDir := filepath.Join(dir, "tls")
	var names []string
	for i := range d.nodes {
		names = append(names, demoNodeID(i))
	}
	if _, err := certs.WriteThrowaway(tlsDir, names); err != nil {
		fmt.Fprintln(out)
		return fmt.Errorf("demo: making a throwaway CA: %w", err)
	}
	members, err := startDemoNodes(dir, tlsDir, d.nodes, timing, logger)
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
		return fmt.Errorf("demo: %w", err)
	}
	nodes := liveNodes(members)

	// The cluster is ready when every node knows a leader that grants.
	readyCtx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	var leader string
	for _, n := range nodes {
		if leader, err = n.WaitForLeader(readyCtx); err != nil {
			fmt.Fprintln(out)
			if c.ctx.Err() != nil {
				return errors.New("demo: interrupted")
			}
			return fmt.Errorf("demo: no leader elected: %w", err)
		}
	}
	lim := fsm.Limit{Rate: d.rate, Burst: d.burst}
	if err := nodes[0].SetLimit(readyCtx, d.key, lim); err != nil {
		fmt.Fprintln(out)
		if c.ctx.Err() != nil {
			return errors.New("demo: interrupted")
		}
		return fmt.Errorf("demo: setting the limit: %w", err)
	}
	// Let every node see the limit before load starts, so that no worker
	// begins by waiting for it.
	for _, n := range nodes {
		for {
			if _, err := n.Limit(readyCtx, d.key); err == nil {
				break
			}
			if !sleep(readyCtx, 10*time.Millisecond) {
				fmt.Fprintln(out)
				return errors.New("demo: interrupted")
			}
		}
	}
	fmt.Fprintf(out, "leader %s elected, limit %q set to %s/s burst %d (%.1fs)\n\n",
		leader, d.key, render.Rate(d.rate), d.burst, time.Since(began).Seconds())

	// Load on every node.
	store := &demoStore{}
	loadCtx, stopLoad := context.WithCancel(c.ctx)
	defer stopLoad()
	start := time.Now()
	for _, m := range members {
		m.rec = &demoRecorder{node: m.id(), store: store}
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
	end := time.NewTimer(d.duration)
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
			printDemoSecond(out, now.Sub(start), now.Sub(prevAt), members, prev, d.rate, d.chaos)
			prevAt = now
			if chaos != nil {
				chaos.step(c, sec, members)
			}
		case r := <-chaosRestarted(chaos):
			chaos.restarting = false
			at := demoSecs(time.Since(start))
			if r.err != nil {
				fmt.Fprintf(out, "t=%-3s  CHAOS: could not restart %s: %v\n", at, chaos.victim.id(), r.err)
				continue
			}
			chaos.restartedAt = time.Now()
			chaos.victim.n = r.n
			chaos.victim.startLoad(loadCtx, d, logger)
			how := "same id, data dir and addresses"
			if d.nodes > 1 {
				how += "; joining the others"
			}
			fmt.Fprintf(out, "t=%-3s  CHAOS: restarted %s (%s)\n", at, chaos.victim.id(), how)
		case <-end.C:
			break loop
		case <-c.ctx.Done():
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
	if d.timeline != "" {
		if err := writeTimeline(d.timeline, events); err != nil {
			return fmt.Errorf("demo: --timeline: %w", err)
		}
	}
	rep := timeline.Check(events, d.key, timeline.Spec{
		Limit:   timeline.Limit{Rate: d.rate, Burst: d.burst},
		Windows: demoWindows,
		Delta:   demoUseGrace,
	})
	fmt.Fprintln(out)
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.id()
	}
	printDemoVerdict(out, rep, elapsed, ids)
	if chaos != nil {
		printDemoRecovery(out, chaos, events, start.Add(elapsed), d.rate, d.nodes)
	}
	if !rep.OK() {
		return exitCode(exitError)
	}
	return nil
}

// chaosRestarted is the channel a restart reports on; nil (never ready)
// without --chaos.
func chaosRestarted(ch *demoChaos) <-chan demoRestart {
	if ch == nil {
		return nil
	}
	return ch.restarted
}

// step runs after the line of second sec: it kills the leader when the
// kill is due (at the first second from killSec at which a leader grants)
// and starts the restart when that is due.
func (ch *demoChaos) step(c *cli, sec int, members []*demoMember) {
	out := c.stdout
	switch {
	case ch.victim == nil && sec >= ch.killSec:
		var victim *demoMember
		for _, m := range members {
			if m.n != nil && m.n.IsLeader() {
				victim = m
			}
		}
		if victim == nil {
			return // an election is going on: try at the next second
		}
		ch.restartSec += sec - ch.killSec
		ch.victim, ch.killedAt = victim, time.Now()
		old, wait := victim.n, victim.wait
		victim.n = nil
		victim.stop() // a crash: its workers stop with it
		ch.closed = make(chan struct{})
		go func() {
			defer close(ch.closed)
			_ = old.Close()
			wait()
		}()
		fmt.Fprintf(out, "t=%-3s  CHAOS: killed the leader %s\n", fmt.Sprintf("%ds", sec), victim.id())
	case ch.victim != nil && ch.victim.n == nil && !ch.restarting && ch.restartedAt.IsZero() && sec >= ch.restartSec:
		ch.restarting = true
		cfg := ch.victim.cfg
		cfg.Join = nil
		for _, m := range members {
			if m != ch.victim {
				cfg.Join = append(cfg.Join, m.cfg.GossipBindAddr)
			}
		}
		go func() {
			<-ch.closed
			ch.restarted <- restartDemoNode(c.ctx, cfg)
		}()
	}
}

// restartDemoNode starts a node again on its data dir and addresses,
// retrying for demoRestartRetry while the old listeners release their
// ports.
func restartDemoNode(ctx context.Context, cfg node.Config) demoRestart {
	deadline := time.Now().Add(demoRestartRetry)
	for {
		n, err := node.New(cfg)
		if err == nil {
			return demoRestart{n: n}
		}
		if time.Now().After(deadline) || !sleep(ctx, 100*time.Millisecond) {
			return demoRestart{err: err}
		}
	}
}

// demoNodeID is the id of the demo's i-th node (from 0).
func demoNodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// startDemoNodes starts count nodes on loopback; the others join the
// first. The configs it keeps name the addresses each node bound. With
// tlsDir (writeThrowawaySecurity's files) the nodes use TLS and encrypted
// gossip.
func startDemoNodes(dir, tlsDir string, count int, timing node.Timing, logger *slog.Logger) ([]*demoMember, error) {
	var members []*demoMember
	for i := range count {
		id := demoNodeID(i)
		cfg := node.Config{
			NodeID:          id,
			DataDir:         filepath.Join(dir, id),
			BindAddr:        "127.0.0.1:0",
			GossipBindAddr:  "127.0.0.1:0",
			BootstrapExpect: count,
			Timing:          timing,
			UseGrace:        demoUseGrace,
			Logger:          logger,
		}
		if tlsDir != "" {
			cfg.TLSCAFile = filepath.Join(tlsDir, "ca.pem")
			cfg.TLSCertFile = filepath.Join(tlsDir, id+".pem")
			cfg.TLSKeyFile = filepath.Join(tlsDir, id+"-key.pem")
			cfg.GossipKeyFile = filepath.Join(tlsDir, "gossip.key")
		}
		if i > 0 {
			cfg.Join = []string{members[0].n.GossipAddr()}
		}
		n, err := node.New(cfg)
		if err != nil {
			return members, fmt.Errorf("starting node %s: %w", id, err)
		}
		cfg.BindAddr, cfg.GossipBindAddr = n.Addr(), n.GossipAddr()
		members = append(members, &demoMember{cfg: cfg, n: n})
	}
	return members, nil
}

// liveNodes returns the members' nodes that are running.
func liveNodes(members []*demoMember) []*node.Node {
	var nodes []*node.Node
	for _, m := range members {
		if m.n != nil {
			nodes = append(nodes, m.n)
		}
	}
	return nodes
}

// closeNodes closes every node, in parallel.
func closeNodes(nodes []*node.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Close() })
	}
	wg.Wait()
}

// demoSecs formats a time since the start in whole seconds, "12s".
func demoSecs(d time.Duration) string {
	return fmt.Sprintf("%ds", int(math.Round(d.Seconds())))
}

// printDemoSecond prints the line of one second: each node's admitted
// rate ("down" while killed), the total and the ceiling; with leader, the
// node that leads and grants ("none" during an election).
func printDemoSecond(w io.Writer, at, span time.Duration, members []*demoMember, prev []uint64, rate float64, leader bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%-3s", demoSecs(at))
	secs := span.Seconds()
	if secs <= 0 {
		secs = 1
	}
	var total uint64
	lead := "none"
	b.WriteString(" ")
	for i, m := range members {
		cur := m.rec.count.Load()
		delta := cur - prev[i]
		prev[i] = cur
		total += delta
		if m.n == nil {
			fmt.Fprintf(&b, " %s=down", m.id())
			continue
		}
		if leader && m.n.IsLeader() {
			lead = m.id()
		}
		fmt.Fprintf(&b, " %s=%.1f/s", m.id(), float64(delta)/secs)
	}
	fmt.Fprintf(&b, "  total=%.1f/s  ceiling=%s/s", float64(total)/secs, render.Rate(rate))
	if leader {
		fmt.Fprintf(&b, "  leader=%s", lead)
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

// recoveryAfter returns how long after from the cluster first admitted at
// least need events in a 1-second window starting at an admitted event
// (so the time is when admission was back at that pace, not earlier), the
// window ending by end. times are sorted unix nanos.
func recoveryAfter(times []int64, from, end time.Time, need float64) (time.Duration, bool) {
	f, e := from.UnixNano(), end.UnixNano()
	i, _ := slices.BinarySearch(times, f)
	j := i
	for ; i < len(times) && times[i]+int64(time.Second) <= e; i++ {
		for j < len(times) && times[j] < times[i]+int64(time.Second) {
			j++
		}
		if float64(j-i) >= need {
			return time.Duration(times[i] - f), true
		}
	}
	return 0, false
}

// printDemoRecovery prints how long the cluster took to admit at least
// demoRecoveredShare of the rate again after the kill and after the
// restart, and when it reached the rate the leader grants while the node
// is down: (N-1)/N of it, as the dead node's share stays reserved for it.
func printDemoRecovery(w io.Writer, ch *demoChaos, events []timeline.Event, end time.Time, rate float64, nodes int) {
	if ch.victim == nil {
		fmt.Fprintf(w, "recovery: the run ended before the kill (planned at t=%ds)\n", ch.killSec)
		return
	}
	times := make([]int64, len(events))
	for i, e := range events {
		times[i] = e.At
	}
	slices.Sort(times)
	need := demoRecoveredShare * rate
	after := func(from time.Time, event string) string {
		if d, ok := recoveryAfter(times, from, end, need); ok {
			return fmt.Sprintf("%.1fs after the %s", d.Seconds(), event)
		}
		return "none within the run after the " + event
	}
	var b strings.Builder
	fmt.Fprintf(&b, "recovery: %s", after(ch.killedAt, "kill"))
	if ch.restartedAt.IsZero() {
		b.WriteString(", no restart within the run")
	} else {
		fmt.Fprintf(&b, ", %s", after(ch.restartedAt, "restart"))
	}
	fmt.Fprintf(&b, " (to >= %.0f%% of %s/s in a 1s window)\n", 100*demoRecoveredShare, render.Rate(rate))
	if nodes > 1 {
		downEnd := end
		if !ch.restartedAt.IsZero() {
			downEnd = ch.restartedAt
		}
		id := ch.victim.id()
		degraded := rate * float64(nodes-1) / float64(nodes)
		fmt.Fprintf(&b, "degraded: while %s was down the others admitted at most %d/%d of the rate (%.1f/s): they\n",
			id, nodes-1, nodes, degraded)
		fmt.Fprintf(&b, "  keep %s's 1/%d for %s, which for all they know is pacing its own callers at that\n", id, nodes, id)
		need := demoRecoveredShare * degraded
		if d, ok := recoveryAfter(times, ch.killedAt, downEnd, need); ok {
			fmt.Fprintf(&b, "  share (fallback, DESIGN 5); the cluster was back to %.0f%% of that %.1fs after the kill\n",
				100*demoRecoveredShare, d.Seconds())
		} else {
			fmt.Fprintf(&b, "  share (fallback, DESIGN 5); the cluster did not get back to %.0f%% of that while %s was down\n",
				100*demoRecoveredShare, id)
		}
	}
	io.WriteString(w, b.String())
}

func printDemoVerdict(w io.Writer, rep timeline.KeyReport, elapsed time.Duration, ids []string) {
	var b strings.Builder
	b.WriteString("per node:")
	for _, id := range ids {
		fmt.Fprintf(&b, " %s=%d", id, rep.PerNode[id])
	}
	b.WriteString("\nwindows: ")
	for i, win := range rep.Windows {
		if i > 0 {
			b.WriteString("  ")
		}
		mark := "<="
		if win.Over {
			mark = ">"
		}
		fmt.Fprintf(&b, "%v max %d %s %s", win.Window, win.MaxCount, mark, formatBound(win.Bound))
	}
	b.WriteString("\n")

	// The window to quote: the most over, else the 1s one.
	quote := -1
	for i, win := range rep.Windows {
		if win.Over && (quote < 0 || float64(win.MaxCount)-win.Bound > float64(rep.Windows[quote].MaxCount)-rep.Windows[quote].Bound) {
			quote = i
		}
	}
	ok := quote < 0
	if ok {
		quote = 0
		for i, win := range rep.Windows {
			if win.Window == time.Second {
				quote = i
			}
		}
	}
	rate := render.Rate(rep.Limit.Rate)
	summary := fmt.Sprintf("%d events in %.1fs = %.1f/s (%.1f%% of %s/s)",
		rep.Events, elapsed.Seconds(), rep.AchievedRate, 100*rep.Utilisation, rate)
	if len(rep.Windows) == 0 {
		fmt.Fprintf(&b, "verdict: OK — %s\n", summary)
		io.WriteString(w, b.String())
		return
	}
	win := rep.Windows[quote]
	if ok {
		fmt.Fprintf(&b, "verdict: OK — %s; no window over R*W+B+R*delta (delta %v; worst %v window: %d <= %s)\n",
			summary, demoUseGrace, win.Window, win.MaxCount, formatBound(win.Bound))
	} else {
		fmt.Fprintf(&b, "verdict: CEILING EXCEEDED — %s; worst %v window: %d > %s at t=%.2fs\n",
			summary, win.Window, win.MaxCount, formatBound(win.Bound),
			time.Duration(win.WorstStart-rep.First).Seconds())
	}
	io.WriteString(w, b.String())
}

func formatBound(b float64) string { return render.Rate(math.Round(b*100) / 100) }

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
