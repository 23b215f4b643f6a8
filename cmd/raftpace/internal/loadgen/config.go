package loadgen

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/atomicfile"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
)

// Spec is one key's load: Concurrency goroutines reserving for Key.
type Spec struct {
	Key         string
	Concurrency int
}

// MaxConcurrency bounds the goroutines of one key, URL or slot group.
const MaxConcurrency = 10000

// ParseSpec splits KEY[:CONCURRENCY]: the part after the last ':' is the
// concurrency when it is a number (default 1).
func ParseSpec(v string) (Spec, error) {
	s := Spec{Key: v, Concurrency: 1}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if c, err := strconv.Atoi(v[i+1:]); err == nil {
			s.Key, s.Concurrency = v[:i], c
		}
	}
	if err := fsm.ValidateKey(s.Key); err != nil {
		return s, err
	}
	if s.Concurrency < 1 || s.Concurrency > MaxConcurrency {
		return s, fmt.Errorf("concurrency %d must be 1-%d", s.Concurrency, MaxConcurrency)
	}
	return s, nil
}

// Config is a load as an operator describes it, beyond its keys: how
// arrivals come, where admitted events and the report go.
type Config struct {
	Rate           float64       // Options.Rate
	MaxWait        time.Duration // Options.MaxWait
	Duration       time.Duration // Options.Duration
	Timeline       string        // the timeline file, "" for none
	TimelineBuffer bool          // append the timeline in batches
	Report         string        // the load report file, "" for none
	With           []string      // Options.With
}

// CheckWith reports what is wrong with keys every event of specs also
// reserves (Options.With): each an event's key, given once, none a load's
// own key, and few enough for one reservation.
func CheckWith(specs []Spec, with []string) error {
	if len(specs) == 0 {
		return fmt.Errorf("--load-with: only meaningful with --load")
	}
	if len(with) >= raftpace.MaxWants { // the load's own key takes one place
		return fmt.Errorf("--load-with: %d keys; an event reserves at most %d with its own", len(with), raftpace.MaxWants-1)
	}
	for i, key := range with {
		if err := fsm.ValidateEventKey(key); err != nil {
			return fmt.Errorf("--load-with %q: %w", key, err)
		}
		if slices.Contains(with[:i], key) {
			return fmt.Errorf("--load-with %q: given twice", key)
		}
		if slices.ContainsFunc(specs, func(s Spec) bool { return s.Key == key }) {
			return fmt.Errorf("--load-with %q: also a --load key; an event reserves its key once", key)
		}
	}
	return nil
}

// reportPause is how many times a report write's duration a writer waits
// before the next write: writes of the report take at most a tenth of a
// core however many keys end.
const reportPause = 9

// Options returns the load's options. With a Report and a Duration, the
// report is rewritten when a key's load ends, so that a benchmark can read
// a key's figures while the process runs on; failures go to log. Keys that
// end while the report is being written are written together by the next
// write: one write per key made a thousand keys that ended together wait
// for a thousand writes of the whole report, one after another (an agent
// of the many-keys bench was still writing 15 s after SIGTERM).
func (c Config) Options(grace time.Duration, nodeID string, log *slog.Logger) Options {
	o := Options{Rate: c.Rate, MaxWait: c.MaxWait, Duration: c.Duration, Grace: grace, With: c.With}
	if c.Report != "" && c.Duration > 0 {
		var (
			mu               sync.Mutex
			writing, pending bool
		)
		o.KeyDone = func(r *Run) {
			mu.Lock()
			if writing {
				pending = true // the writer writes again, with this key
				mu.Unlock()
				return
			}
			writing = true
			for {
				pending = false
				mu.Unlock()
				began := time.Now()
				if err := c.WriteReport(r, nodeID); err != nil {
					log.Error("writing the load report", "err", err)
				}
				took := time.Since(began)
				mu.Lock()
				if !pending {
					writing = false
					mu.Unlock()
					return
				}
				// More keys ended meanwhile: write again, but after nine
				// times as long as this write took. 10,000 keys ending over
				// 3 s had the report (3 MB) rewritten back to back for those
				// 3 s, a core each agent took from the keys still running.
				mu.Unlock()
				time.Sleep(reportPause * took)
				mu.Lock()
			}
		}
	}
	return o
}

// TimelineRecorder records admitted events to a timeline file.
type TimelineRecorder interface {
	Recorder
	Close() error
}

// OpenTimeline opens the timeline for nodeID: a timeline.Writer (one
// write(2) per event), or with TimelineBuffer a buffered one. It returns
// nil without a Timeline.
func (c Config) OpenTimeline(nodeID string) (TimelineRecorder, error) {
	if c.Timeline == "" {
		return nil, nil
	}
	w, err := timeline.NewWriter(c.Timeline, nodeID)
	if err != nil || !c.TimelineBuffer {
		return w, err
	}
	// NewWriter has checked the node id and the file's last line.
	w.Close()
	return newBufferedTimeline(c.Timeline, nodeID, timelineFlushEvery)
}

// WriteReport writes the Report file, if one is set, replacing it whole.
func (c Config) WriteReport(r *Run, nodeID string) error {
	if c.Report == "" || r == nil {
		return nil
	}
	rep := r.Report(nodeID)
	for _, k := range rep.Keys {
		k.Rate = c.Rate
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(c.Report, append(b, '\n'), 0o644)
}
