package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
)

const checkAbout = `Merges timeline files (one line per admitted event: "unix_nanos node_id key",
as written by 'raftpace agent --load ... --timeline FILE') and checks the
ceiling: for each window length W, no window of that length may hold more than
R*W + B + R*delta events of a key, across all files. It prints, per key, the
largest count in any window of each length against that bound, the events
per node and the achieved rate, and exits 1 if any window is over its bound.

With several nodes it also prints the spread: each node's longest gap (the
longest stretch of the key's span without an event of that node) and the
seconds in which some node admitted under half an even share of that
second's events. It says how fair the sharing was when every node wanted
events all along (a load generator at saturation); it never fails a check.

A file may end in a torn line with no newline, left by an agent killed
while recording an event: check accepts it, counts it if it still holds a
whole event (and, as its key may be cut short, for every checked key it is
the start of) and prints a note naming the file.

Without --key every key in the files is checked against the same --rate and
--burst.`

// checkWindows is a comma-separated list of window lengths.
type checkWindows []time.Duration

func (w *checkWindows) String() string {
	if w == nil {
		return ""
	}
	parts := make([]string, len(*w))
	for i, d := range *w {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (w *checkWindows) Set(v string) error {
	var out checkWindows
	for _, p := range strings.Split(v, ",") {
		d, err := parseSeconds(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("window %q: must be positive", p)
		}
		out = append(out, d)
	}
	*w = out
	return nil
}

// parseSeconds accepts a Go duration ("500ms") or a number of seconds ("0.5").
func parseSeconds(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > 1e9 || f < -1e9 {
		return 0, fmt.Errorf("%q: not a duration (like 500ms, 2s) or a number of seconds", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// checkJSON is the --json output of check.
type checkJSON struct {
	OK   bool            `json:"ok"`
	Keys []keyReportJSON `json:"keys"`
}

type keyReportJSON struct {
	Key          string         `json:"key"`
	Rate         float64        `json:"rate"`
	Burst        int            `json:"burst"`
	Events       int            `json:"events"`
	First        int64          `json:"first_unix_nanos"`
	Last         int64          `json:"last_unix_nanos"`
	AchievedRate float64        `json:"achieved_rate"`
	Utilisation  float64        `json:"utilisation"`
	PerNode      map[string]int `json:"per_node"`
	Spread       spreadJSON     `json:"spread"`
	Windows      []windowJSON   `json:"windows"`
	OK           bool           `json:"ok"`
}

// spreadJSON is timeline.Fairness: how evenly the nodes admitted.
type spreadJSON struct {
	LongestGapNS   map[string]int64 `json:"longest_gap_ns"`
	Seconds        int              `json:"seconds"`
	StarvedSeconds int              `json:"starved_seconds"`
}

type windowJSON struct {
	Window     string  `json:"window"`
	WindowNS   int64   `json:"window_ns"`
	MaxCount   int     `json:"max_count"`
	Bound      float64 `json:"bound"`
	WorstStart int64   `json:"worst_start_unix_nanos"`
	Over       bool    `json:"over"`
}

func reportJSON(r timeline.KeyReport) keyReportJSON {
	out := keyReportJSON{
		Key: r.Key, Rate: r.Limit.Rate, Burst: r.Limit.Burst, Events: r.Events,
		First: r.First, Last: r.Last, AchievedRate: r.AchievedRate, Utilisation: r.Utilisation,
		PerNode: r.PerNode, OK: r.OK(),
		Spread: spreadJSON{LongestGapNS: map[string]int64{}, Seconds: r.Fairness.Seconds, StarvedSeconds: r.Fairness.Starved},
	}
	for n, g := range r.Fairness.LongestGap {
		out.Spread.LongestGapNS[n] = int64(g)
	}
	for _, w := range r.Windows {
		out.Windows = append(out.Windows, windowJSON{
			Window: w.Window.String(), WindowNS: int64(w.Window), MaxCount: w.MaxCount,
			Bound: w.Bound, WorstStart: w.WorstStart, Over: w.Over,
		})
	}
	return out
}

func (c *cli) check(name string, args []string) error {
	f := cmdline.New("check", "--rate R [--burst B] [--key K] [--window 500ms,1s,2s,5s] [--delta D] [--json] FILE...", checkAbout)
	rate := f.String("rate", "", "the limit's rate `R`, events per second (required)")
	burst := f.Int("burst", 1, "the limit's burst `B`")
	key := f.String("key", "", "check only `KEY` (default: every key in the files)")
	windows := checkWindows(timeline.DefaultWindows())
	f.Var(&windows, "window", "window lengths `W,...` to check (durations, or seconds)")
	// The promise's delta by default (the agent's default --use-grace): a
	// check without it failed runs the cluster had kept its word on.
	delta := f.Duration("delta", 50*time.Millisecond, "allowance for the delay between a grant and its use: the bound is R*W+B+R*`D`;\nthe agents' --use-grace (0 checks the stricter R*W+B)")
	asJSON := f.Bool("json", false, "print the reports as JSON")
	files, err := c.parse(f, args)
	if err != nil {
		return err
	}
	r, err := f.Rate(*rate)
	if err != nil {
		return err
	}
	if p := (fsm.Limit{Rate: r, Burst: *burst}).Explain("--rate", "--burst"); len(p) > 0 {
		return f.ValueError("%s", strings.Join(p, "; "))
	}
	if *delta < 0 {
		return f.ValueError("--delta %v: must not be negative", *delta)
	}
	if *key != "" {
		if err := fsm.ValidateKey(*key); err != nil {
			return f.ValueError("--key: %v", err)
		}
	}
	if len(files) == 0 {
		return f.UsageError("at least one timeline FILE is required")
	}
	events, torn, err := timeline.ParseFilesTorn(files...)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	keys := []string{*key}
	if *key == "" {
		seen := map[string]bool{}
		keys = keys[:0]
		for _, e := range events {
			if !seen[e.Key] {
				seen[e.Key] = true
				keys = append(keys, e.Key)
			}
		}
		slices.Sort(keys)
	}
	events = countTorn(c.stderr, events, torn, keys)
	spec := timeline.Spec{Limit: timeline.Limit{Rate: r, Burst: *burst}, Windows: windows, Delta: *delta}
	var reports []timeline.KeyReport
	var over []string
	for _, k := range keys {
		rep := timeline.Check(events, k, spec)
		reports = append(reports, rep)
		if !rep.OK() {
			over = append(over, k)
		}
		if rep.Events == 0 {
			fmt.Fprintf(c.stderr, "raftpace: check: warning: no events for key %q in %d file(s)\n", k, len(files))
		}
	}
	if len(keys) == 0 {
		fmt.Fprintf(c.stderr, "raftpace: check: warning: no events in %d file(s)\n", len(files))
	}
	if *asJSON {
		out := checkJSON{OK: len(over) == 0, Keys: []keyReportJSON{}}
		for _, rep := range reports {
			out.Keys = append(out.Keys, reportJSON(rep))
		}
		if err := render.JSON(c.stdout, out); err != nil {
			return err
		}
	} else {
		printCheck(c.stdout, reports, spec, len(events), len(files), over)
	}
	if len(over) > 0 {
		fmt.Fprintf(c.stderr, "raftpace: check: ceiling exceeded for %s\n", quoteList(over))
		return exitCode(exitError)
	}
	return nil
}

// countTorn notes every torn last line (a writer killed while recording
// its event). One that still held a whole event is among the events; its
// key may have been cut short, so it is also counted for each checked key
// its key is the start of: over-counting is the safe side of a ceiling.
func countTorn(stderr io.Writer, events []timeline.Event, torn []timeline.TornTail, keys []string) []timeline.Event {
	for _, t := range torn {
		fmt.Fprintf(stderr, "raftpace: check: note: %s\n", t)
		if !t.Counted {
			continue
		}
		for _, k := range keys {
			if k != t.Event.Key && strings.HasPrefix(k, t.Event.Key) {
				events = append(events, timeline.Event{At: t.Event.At, Node: t.Event.Node, Key: k})
				fmt.Fprintf(stderr, "raftpace: check: note: its key may have been cut short: counted for key %q too\n", k)
			}
		}
	}
	return events
}

func printCheck(w io.Writer, reports []timeline.KeyReport, spec timeline.Spec, events, files int, over []string) {
	bound := "R*W+B"
	if spec.Delta > 0 {
		bound = fmt.Sprintf("R*W+B+R*%v", spec.Delta)
	}
	fmt.Fprintf(w, "%d event(s) in %d file(s); limit %s/s burst %d; bound %s\n",
		events, files, render.Rate(spec.Limit.Rate), spec.Limit.Burst, bound)
	for _, rep := range reports {
		fmt.Fprintf(w, "%s\n", rep)
	}
	if len(over) > 0 {
		fmt.Fprintf(w, "FAIL: ceiling exceeded for %s\n", quoteList(over))
		return
	}
	fmt.Fprintf(w, "OK: no window over %s\n", bound)
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return "key " + strings.Join(q, ", ")
}
