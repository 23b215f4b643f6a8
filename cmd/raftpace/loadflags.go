package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
)

// loadFlags are the load generator's flags, shared by agent and
// bench-worker: one load generator, one set of flags.
type loadFlags struct {
	load, with cmdline.List
	loadgen.Config
}

// register defines the flags on f; env lists the flags that get RAFTPACE_*
// equivalents.
func (l *loadFlags) register(f *cmdline.Flags, env bool) {
	f.Var(&l.load, "load", "generate load: `KEY[:CONCURRENCY]` goroutines calling Wait(KEY) in a loop\n(tests and demos; may repeat; in RAFTPACE_LOAD separate with spaces)")
	f.Var(&l.with, "load-with", "every --load event also reserves one event of `KEY`, in the same reservation\n(ReserveAll: at one instant, or none); recorded under each key. May repeat")
	f.StringVar(&l.Timeline, "timeline", "", "append each admitted --load event to `FILE` (\"unix_nanos node_id key\" lines)")
	f.BoolVar(&l.TimelineBuffer, "timeline-buffer", false, "keep --timeline events in memory and append them every 50ms and at exit\n(benchmarks at high rates; a SIGKILL loses up to the last 50ms)")
	f.Float64Var(&l.Rate, "load-rate", 0, "open loop: offer `R` arrivals per second per key, evenly spaced, to the key's\nworkers through a bounded queue; an arrival that finds it full is shed.\n0: closed loop, each worker reserves again once it has admitted")
	f.DurationVar(&l.MaxWait, "load-max-wait", time.Second, "with --load-rate: the longest wait (`DURATION`) a worker accepts; a longer\none is refused (shed, nothing consumed)")
	f.DurationVar(&l.Duration, "load-duration", 0, "stop each key's load `DURATION` after it starts (its limit known); 0: never")
	f.StringVar(&l.Report, "load-report", "", "at exit, write to `FILE` per key the latency of each reservation call\n(p50, p99, mean, max; the paced sleep excluded) and the admitted and shed\ncounts, as JSON")
	if env {
		f.WithEnv("load", "load-with", "timeline", "timeline-buffer", "load-rate", "load-max-wait", "load-duration", "load-report")
	}
}

// parseLoad parses one --load value, KEY[:CONCURRENCY].
func parseLoad(v string) (loadgen.Spec, error) {
	s, err := loadgen.ParseSpec(v)
	if err != nil {
		return s, fmt.Errorf("--load %q: %w", v, err)
	}
	return s, nil
}

// validate checks the flags, reports each problem to bad and returns the
// load specs.
func (l *loadFlags) validate(bad func(error)) []loadgen.Spec {
	var specs []loadgen.Spec
	seen := map[string]bool{}
	for _, v := range l.load.Items {
		s, err := parseLoad(v)
		if err != nil {
			bad(err)
			continue
		}
		if seen[s.Key] {
			bad(fmt.Errorf("--load %q: key %q given twice", v, s.Key))
			continue
		}
		seen[s.Key] = true
		specs = append(specs, s)
	}
	if l.With = l.with.Items; len(l.With) > 0 {
		if err := loadgen.CheckWith(specs, l.With); err != nil {
			bad(err)
		}
	}
	noLoad := len(l.load.Items) == 0
	if l.Timeline != "" && noLoad {
		bad(errors.New("--timeline: only meaningful with --load"))
	}
	if l.TimelineBuffer && l.Timeline == "" {
		bad(errors.New("--timeline-buffer: only meaningful with --timeline"))
	}
	if l.Report != "" && noLoad {
		bad(errors.New("--load-report: only meaningful with --load"))
	}
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0 {
		bad(fmt.Errorf("--load-rate %v: must be a finite number >= 0 (0: closed loop)", l.Rate))
	}
	if l.MaxWait < 0 {
		bad(fmt.Errorf("--load-max-wait %v: must be >= 0", l.MaxWait))
	}
	if l.Duration < 0 {
		bad(fmt.Errorf("--load-duration %v: must be >= 0", l.Duration))
	}
	return specs
}
