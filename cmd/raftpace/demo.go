package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

Needs no configuration, no Postgres and no network beyond loopback.`

// demoWindows are the windows the demo's verdict checks.
var demoWindows = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

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
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.noArgs(pos); err != nil {
		return err
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

func (c *cli) runDemo(d demoConfig) (err error) {
	out := c.stdout
	fmt.Fprintf(out, "raftpace demo: %d raftpace nodes in this process, one limit shared by all.\n", d.nodes)
	fmt.Fprintf(out, "Every node runs %d workers calling Wait(%q) as fast as they are let through,\n", d.concurrency, d.key)
	fmt.Fprintf(out, "so demand is far above the limit; the raft leader paces the whole cluster at\n")
	fmt.Fprintf(out, "%s/s (burst %d): no window of W seconds may admit more than %s*W+%d events\n",
		formatRate(d.rate), d.burst, formatRate(d.rate), d.burst)
	fmt.Fprintf(out, "(+%s*%v for the delay between a grant and its use: R*W+B+R*delta).\n",
		formatRate(d.rate), demoUseGrace)
	fmt.Fprintf(out, "Each second: events admitted per node over the last second, and their total.\n")
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

	began := time.Now()
	fmt.Fprintf(out, "starting %d nodes... ", d.nodes)
	nodes, err := startDemoNodes(dir, d.nodes, logger)
	defer closeNodes(nodes)
	if err != nil {
		fmt.Fprintln(out)
		return fmt.Errorf("demo: %w", err)
	}

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
		leader, d.key, formatRate(d.rate), d.burst, time.Since(began).Seconds())

	// Load on every node.
	store := &demoStore{}
	recs := make([]*demoRecorder, len(nodes))
	loadCtx, stopLoad := context.WithCancel(c.ctx)
	defer stopLoad()
	var waits []func()
	start := time.Now()
	for i, n := range nodes {
		recs[i] = &demoRecorder{node: n.ID(), store: store}
		waits = append(waits, startLoad(loadCtx, n, []loadSpec{{key: d.key, concurrency: d.concurrency}}, "raft", recs[i], logger))
	}
	stopAll := func() {
		stopLoad()
		for _, w := range waits {
			w()
		}
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(d.duration)
	defer end.Stop()
	prev := make([]uint64, len(nodes))
	interrupted := false
	prevAt := start
loop:
	for {
		select {
		case now := <-tick.C:
			printDemoSecond(out, now.Sub(start), now.Sub(prevAt), nodes, recs, prev, d.rate)
			prevAt = now
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
	printDemoVerdict(out, rep, elapsed, nodes)
	if !rep.OK() {
		return exitCode(exitError)
	}
	return nil
}

// startDemoNodes starts n nodes on loopback; the others join the first.
func startDemoNodes(dir string, count int, logger *slog.Logger) ([]*node.Node, error) {
	var nodes []*node.Node
	for i := range count {
		id := fmt.Sprintf("n%d", i+1)
		cfg := node.Config{
			NodeID:          id,
			DataDir:         filepath.Join(dir, id),
			BindAddr:        "127.0.0.1:0",
			GossipBindAddr:  "127.0.0.1:0",
			BootstrapExpect: count,
			Timing:          node.FastTiming(),
			UseGrace:        demoUseGrace,
			Logger:          logger,
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		n, err := node.New(cfg)
		if err != nil {
			return nodes, fmt.Errorf("starting node %s: %w", id, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// closeNodes closes every node, in parallel.
func closeNodes(nodes []*node.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Close() })
	}
	wg.Wait()
}

func printDemoSecond(w io.Writer, at, span time.Duration, nodes []*node.Node, recs []*demoRecorder, prev []uint64, rate float64) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%-3s", fmt.Sprintf("%ds", int(math.Round(at.Seconds()))))
	secs := span.Seconds()
	if secs <= 0 {
		secs = 1
	}
	var total uint64
	b.WriteString(" ")
	for i, n := range nodes {
		cur := recs[i].count.Load()
		delta := cur - prev[i]
		prev[i] = cur
		total += delta
		fmt.Fprintf(&b, " %s=%.1f/s", n.ID(), float64(delta)/secs)
	}
	fmt.Fprintf(&b, "  total=%.1f/s  ceiling=%s/s\n", float64(total)/secs, formatRate(rate))
	io.WriteString(w, b.String())
}

func printDemoVerdict(w io.Writer, rep timeline.KeyReport, elapsed time.Duration, nodes []*node.Node) {
	var b strings.Builder
	b.WriteString("per node:")
	for _, n := range nodes {
		fmt.Fprintf(&b, " %s=%d", n.ID(), rep.PerNode[n.ID()])
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
	rate := formatRate(rep.Limit.Rate)
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
