package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// loadFlags are the load generator's flags, shared by agent and
// bench-worker: one load generator, one set of flags.
type loadFlags struct {
	load           listFlag
	timeline       string
	timelineBuffer bool
	rate           float64
	maxWait        time.Duration
	duration       time.Duration
	report         string
}

// register defines the flags on f; env lists the flags that get RAFTPACE_*
// equivalents.
func (l *loadFlags) register(f *flags, env bool) {
	f.Var(&l.load, "load", "generate load: `KEY[:CONCURRENCY]` goroutines calling Wait(KEY) in a loop\n(tests and demos; may repeat; in RAFTPACE_LOAD separate with spaces)")
	f.StringVar(&l.timeline, "timeline", "", "append each admitted --load event to `FILE` (\"unix_nanos node_id key\" lines)")
	f.BoolVar(&l.timelineBuffer, "timeline-buffer", false, "keep --timeline events in memory and append them every 50ms and at exit\n(benchmarks at high rates; a SIGKILL loses up to the last 50ms)")
	f.Float64Var(&l.rate, "load-rate", 0, "open loop: offer `R` arrivals per second per key, evenly spaced, to the key's\nworkers through a bounded queue; an arrival that finds it full is shed.\n0: closed loop, each worker reserves again once it has admitted")
	f.DurationVar(&l.maxWait, "load-max-wait", time.Second, "with --load-rate: the longest wait (`DURATION`) a worker accepts; a longer\none is refused (shed, nothing consumed)")
	f.DurationVar(&l.duration, "load-duration", 0, "stop each key's load `DURATION` after it starts (its limit known); 0: never")
	f.StringVar(&l.report, "load-report", "", "at exit, write to `FILE` per key the latency of each reservation call\n(p50, p99, mean, max; the paced sleep excluded) and the admitted and shed\ncounts, as JSON")
	if env {
		f.withEnv("load", "timeline", "timeline-buffer", "load-rate", "load-max-wait", "load-duration", "load-report")
	}
}

// validate checks the flags, reports each problem to bad and returns the
// load specs.
func (l *loadFlags) validate(bad func(error)) []loadSpec {
	var specs []loadSpec
	seen := map[string]bool{}
	for _, v := range l.load.items {
		s, err := parseLoad(v)
		if err != nil {
			bad(err)
			continue
		}
		if seen[s.key] {
			bad(fmt.Errorf("--load %q: key %q given twice", v, s.key))
			continue
		}
		seen[s.key] = true
		specs = append(specs, s)
	}
	noLoad := len(l.load.items) == 0
	if l.timeline != "" && noLoad {
		bad(errors.New("--timeline: only meaningful with --load"))
	}
	if l.timelineBuffer && l.timeline == "" {
		bad(errors.New("--timeline-buffer: only meaningful with --timeline"))
	}
	if l.report != "" && noLoad {
		bad(errors.New("--load-report: only meaningful with --load"))
	}
	if math.IsNaN(l.rate) || math.IsInf(l.rate, 0) || l.rate < 0 {
		bad(fmt.Errorf("--load-rate %v: must be a finite number >= 0 (0: closed loop)", l.rate))
	}
	if l.maxWait < 0 {
		bad(fmt.Errorf("--load-max-wait %v: must be >= 0", l.maxWait))
	}
	if l.duration < 0 {
		bad(fmt.Errorf("--load-duration %v: must be >= 0", l.duration))
	}
	return specs
}

// options returns the load's options. With --load-report and
// --load-duration, the report is rewritten each time a key's load ends, so
// that a benchmark can read a key's figures while the process runs on.
func (l *loadFlags) options(grace time.Duration, nodeID string, log *slog.Logger) loadOptions {
	o := loadOptions{rate: l.rate, maxWait: l.maxWait, duration: l.duration, grace: grace}
	if l.report != "" && l.duration > 0 {
		var mu sync.Mutex
		o.keyDone = func(r *loadRun) {
			mu.Lock()
			defer mu.Unlock()
			if err := l.writeReport(r, nodeID); err != nil {
				log.Error("writing the load report", "err", err)
			}
		}
	}
	return o
}

// timelineRecorder records admitted events to a timeline file.
type timelineRecorder interface {
	recorder
	Close() error
}

// openTimeline opens --timeline for nodeID: a timeline.Writer (one write(2)
// per event), or with --timeline-buffer a bufferedTimeline. It returns nil
// without --timeline.
func (l *loadFlags) openTimeline(nodeID string) (timelineRecorder, error) {
	if l.timeline == "" {
		return nil, nil
	}
	w, err := timeline.NewWriter(l.timeline, nodeID)
	if err != nil || !l.timelineBuffer {
		return w, err
	}
	// NewWriter has checked the node id and the file's last line.
	w.Close()
	return newBufferedTimeline(l.timeline, nodeID, timelineFlushEvery)
}

// writeReport writes --load-report, if set (replacing the file whole).
func (l *loadFlags) writeReport(r *loadRun, nodeID string) error {
	if l.report == "" || r == nil {
		return nil
	}
	rep := r.report(nodeID)
	for _, k := range rep.Keys {
		k.Rate = l.rate
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(l.report, append(b, '\n'))
}

// timelineFlushEvery is how often a bufferedTimeline appends its events.
const timelineFlushEvery = 50 * time.Millisecond

// bufferedTimeline is --timeline-buffer: events kept in memory and
// appended to the file (one write per batch, O_APPEND) every flush period
// and at Close. At 100,000 events/s one write(2) per event costs a
// benchmark's processes a noticeable share of two cores; this costs a
// process that is SIGKILLed its last period of events, which is why it is
// opt-in and the default Writer stays unbuffered. Safe for concurrent use.
type bufferedTimeline struct {
	path string
	node string
	f    *os.File
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	events []timeline.Event
	closed bool
	err    error // the first failed flush; later Records return it
}

func newBufferedTimeline(path, nodeID string, every time.Duration) (*bufferedTimeline, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	b := &bufferedTimeline{path: path, node: nodeID, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go b.flusher(every)
	return b, nil
}

func (b *bufferedTimeline) flusher(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.flush()
		case <-b.stop:
			return
		}
	}
}

// Record keeps the event for the next flush.
func (b *bufferedTimeline) Record(key string, at time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("timeline: record %q: %w", key, timeline.ErrClosed)
	}
	if b.err != nil {
		return b.err
	}
	b.events = append(b.events, timeline.Event{At: at.UnixNano(), Node: b.node, Key: key})
	return nil
}

// flush appends the kept events in one write. WriteEvents validates them
// first, so a bad event writes nothing of its batch.
func (b *bufferedTimeline) flush() error {
	b.mu.Lock()
	events := b.events
	b.events = make([]timeline.Event, 0, cap(events))
	b.mu.Unlock()
	if len(events) == 0 {
		return nil
	}
	var buf bytes.Buffer
	err := timeline.WriteEvents(&buf, events)
	if err == nil {
		_, err = b.f.Write(buf.Bytes())
	}
	if err != nil {
		err = fmt.Errorf("timeline: %s: %w", b.path, err)
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return err
}

// Close flushes what is left and closes the file. It is idempotent.
func (b *bufferedTimeline) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	err := b.flush()
	if cerr := b.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("timeline: close %s: %w", b.path, cerr)
	}
	return err
}
