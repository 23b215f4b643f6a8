package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Markdown renders the report: the latency table, the ceiling tables, the
// Python section, the targets, what was skipped, and a legend. Each figure is followed by its
// ratio to raftpace's ("0.47 ms (x31)": 31 times raftpace's figure).
func (r *Report) Markdown() string {
	var b strings.Builder
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "# raftpace bench (%s mode)\n\n", mode)
	fmt.Fprintf(&b, "%s, %s/%s, %d CPUs, %s", r.Date.Format("2006-01-02 15:04 MST"), r.Host.OS, r.Host.Arch, r.Host.CPUs, r.Host.Go)
	if r.Command != "" {
		fmt.Fprintf(&b, ", `%s`", r.Command)
	}
	if r.Elapsed > 0 {
		fmt.Fprintf(&b, ", %.0f s", r.Elapsed.Seconds())
	}
	b.WriteString(".\n\n")

	if len(r.Latency) > 0 {
		r.latencyTable(&b)
	}
	if tp := r.Throughput; tp != nil {
		fmt.Fprintf(&b, "Leader's grants through leases: %d followers x %d callers at an unlimited rate used %s slots/s "+
			"(%s slots/s leased, in %s leases/s); the leader, calling nothing itself, used %.0f%% of one core "+
			"(utime+stime from /proc over %.1f s).\n\n",
			tp.Followers, tp.Callers/max(tp.Followers, 1), FormatCount(tp.SlotsPerSec), FormatCount(tp.LeasedSlotsPerSec),
			FormatCount(tp.LeasesPerSec), 100*tp.LeaderCPU, tp.Seconds)
	}
	for _, rate := range r.ceilingRates() {
		r.ceilingTable(&b, rate)
	}
	if r.WideKeys != nil {
		fmt.Fprintf(&b, "Wide keys (one template, every key used once, %d processes): %s.\n\n", r.WideKeys.Processes, r.WideKeys.Summary())
	}
	if len(r.ManyKeys) > 0 {
		r.manyKeysTable(&b)
	}
	if r.Python != nil {
		r.Python.section(&b)
	}
	if len(r.Targets) > 0 {
		b.WriteString("## Performance targets\n\n| target | wanted | measured | met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "no"
			switch {
			case !t.Measured:
				met = "not measured"
			case t.Met:
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
		b.WriteString("\n")
	}
	if len(r.Skipped) > 0 {
		b.WriteString("## Skipped\n\n")
		for _, s := range r.Skipped {
			fmt.Fprintf(&b, "- %s: skipped: %s\n", s.Approach, s.Reason)
		}
		b.WriteString("\n")
	}
	if len(r.Failures) > 0 {
		b.WriteString("## Failed steps\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s: %s\n", f.Step, f.Error)
		}
		b.WriteString("\n")
	}
	b.WriteString(legend)
	return b.String()
}

const legend = `## Legend

- **p50/p99**: latency of one reservation call (the grant's cost: from the
  call until it returned, the paced sleep excluded) at an unlimited rate
  (1e9/s, burst 1000), one process, 1 or 16 concurrent callers.
- **reservations/s**: reservation calls per second in that process with 16
  callers.
- **(xN)**: the figure divided by raftpace's (the follower with leases for
  latency, raftpace (leases) for ceilings): x31 is 31 times raftpace's,
  x1/750 a 750th of it.
- **Ceilings**: burst 1; demand 3x the ceiling, open loop (evenly spaced
  arrivals, shed when the callers cannot take them or the wait would pass
  the maximum), from 3 processes (x/time/rate, 1 process: all of it).
  **admitted** is the admitted rate over the steady interval (from 1 s
  after the last process started) as % of the ceiling. **worst 1 s
  window** is the most events in any closed 1 s window against the bound
  R*W + B + R*delta; **lengths over** counts the window lengths (0.5, 1, 2,
  5 s) whose worst window is over the bound. delta = 50 ms (raftpace's
  default UseGrace) for every approach: each may use a slot up to 50 ms
  after its time, measured from when it asked. **shed**: arrivals not
  admitted (the callers were busy, or the wait would pass the maximum);
  **late**: grants dropped because they could not be used by then (an
  answer that took longer than 50 ms, or a caller woken too late).
- **Many slow keys** (raftpace only): every key at the rate its table
  names (2/s unless --key-rate), burst 1, each of 3 agents with one
  closed-loop worker per key. **admitted** is each key over its own steady
  interval (from 1 s after its load started on the last agent to when it
  stopped on the first): its events there as % of the slots a pacer that
  lost none would have given it there (its slot grid, every 1/rate from
  its last event before the interval), summed over keys; **keys below
  95%** and **worst key** by the same measure; **windows over** the window
  lengths over the bound, summed over keys. One event is 1/(rate x
  seconds) of a key's count (2% at 1/s over 48 s). The figure against
  rate x seconds instead is in report.json (admitted_pct_of_span): up to
  one event per key lower with every key paced exactly, since a key's
  interval and its slots both run from its start.
`

func (r *Report) latencyTable(b *strings.Builder) {
	var callers []int
	for _, row := range r.Latency {
		for n := range row.ByCallers {
			if !slices.Contains(callers, n) {
				callers = append(callers, n)
			}
		}
	}
	slices.Sort(callers)
	var ref *LatencyRow
	for _, row := range r.Latency {
		if row.ID == latencyRef {
			ref = row
		}
	}
	b.WriteString("## Reservation latency and throughput (unlimited rate)\n\n| approach |")
	for _, n := range callers {
		fmt.Fprintf(b, " p50, %s | p99, %s |", CallersLabel(n), CallersLabel(n))
	}
	resN := callers[len(callers)-1]
	fmt.Fprintf(b, " reservations/s, %s |\n|---|", CallersLabel(resN))
	for range callers {
		b.WriteString("---|---|")
	}
	b.WriteString("---|\n")
	for _, row := range r.Latency {
		fmt.Fprintf(b, "| %s |", row.Label)
		for _, n := range callers {
			f := row.ByCallers[n]
			var rf *LatencyFigures
			if ref != nil && row != ref {
				rf = ref.ByCallers[n]
			}
			if f == nil {
				b.WriteString(" - | - |")
				continue
			}
			fmt.Fprintf(b, " %s%s | %s%s |", fmtDur(f.P50), refRatio(float64(f.P50), rf, func(x *LatencyFigures) float64 { return float64(x.P50) }),
				fmtDur(f.P99), refRatio(float64(f.P99), rf, func(x *LatencyFigures) float64 { return float64(x.P99) }))
		}
		if f := row.ByCallers[resN]; f != nil {
			var rf *LatencyFigures
			if ref != nil && row != ref {
				rf = ref.ByCallers[resN]
			}
			fmt.Fprintf(b, " %s%s |\n", FormatCount(f.PerSecond), refRatio(f.PerSecond, rf, func(x *LatencyFigures) float64 { return x.PerSecond }))
		} else {
			b.WriteString(" - |\n")
		}
	}
	b.WriteString("\n")
}

func refRatio(v float64, rf *LatencyFigures, get func(*LatencyFigures) float64) string {
	if rf == nil {
		return ""
	}
	return ratio(v, get(rf))
}

func (r *Report) ceilingRates() []float64 {
	var rates []float64
	for _, c := range r.Ceilings {
		if !slices.Contains(rates, c.Rate) {
			rates = append(rates, c.Rate)
		}
	}
	slices.Sort(rates)
	return rates
}

func (r *Report) ceilingTable(b *strings.Builder, rate float64) {
	var rows, refs []*CeilingResult
	for _, id := range rowOrder {
		for _, c := range r.Ceilings {
			if c.Rate == rate && c.ID == id {
				rows = append(rows, c)
				if id == ceilingRef {
					refs = append(refs, c)
				}
			}
		}
	}
	var ref *CeilingResult
	if len(refs) > 0 {
		ref = refs[0]
	}
	fmt.Fprintf(b, "## Ceiling %s/s (burst 1, demand %s/s)\n\n", FormatRate(rate), FormatRate(CeilingDemand*rate))
	b.WriteString("| approach | processes x callers | admitted (% of ceiling) | worst 1 s window / bound | lengths over | shed | late |\n|---|---|---|---|---|---|---|\n")
	for _, c := range rows {
		adm := fmt.Sprintf("%.1f%%", c.AdmittedPct)
		if ref != nil && c != ref {
			adm += ratio(c.AdmittedPct, ref.AdmittedPct)
		}
		worst := "-"
		if w := c.Window(time.Second); w != nil {
			worst = fmt.Sprintf("%d / %.1f", w.Max, w.Bound)
			if w.Over {
				worst = "**" + worst + " over**"
			}
		}
		over := fmt.Sprintf("%d of %d", c.WindowsOver, len(c.Windows))
		if c.WindowsOver > 0 {
			over = "**" + over + "**"
		}
		fmt.Fprintf(b, "| %s | %d x %d | %s | %s | %s | %s | %s |\n", RowLabel(c.ID), c.Processes, c.Concurrency, adm, worst, over,
			FormatCount(float64(c.Shed)), FormatCount(float64(c.Forfeited)))
	}
	b.WriteString("\n")
}

// manyKeysTable renders the many-slow-keys results, in key count order,
// under a title taken from the first (every run has the same limit and
// agents).
func (r *Report) manyKeysTable(b *strings.Builder) {
	rows := slices.Clone(r.ManyKeys)
	slices.SortStableFunc(rows, func(x, y *ManyKeysResult) int { return x.Keys - y.Keys })
	m := rows[0]
	how := ""
	if m.Template {
		how = ", limits by one template"
	}
	fmt.Fprintf(b, "## Many slow keys (%s/s, burst %d%s, one worker per key per agent, %d agents)\n\n", FormatRate(m.Rate), m.Burst, how, m.Processes)
	b.WriteString("| keys | admitted (aggregate) | worst key | keys below 95% | keys admitting nothing | windows over | agents' CPU per event | events per agent |\n|---|---|---|---|---|---|---|---|\n")
	var secs []string
	for _, m := range rows {
		over := strconv.Itoa(m.WindowsOver)
		if m.WindowsOver > 0 {
			over = "**" + over + "**"
		}
		idle := strconv.Itoa(m.Idle)
		if m.Idle > 0 {
			idle = "**" + idle + "**"
		}
		cpu := "-"
		if m.CPUPerEventUs > 0 {
			cpu = fmt.Sprintf("%.0f us", m.CPUPerEventUs)
		}
		fmt.Fprintf(b, "| %s | %.1f%% | %.1f%% (%s) | %d | %s | %s | %s | %s |\n", FormatRate(float64(m.Keys)), m.AdmittedPct, m.WorstPct, m.WorstKey, m.Below95, idle, over, cpu, m.agentShares())
		secs = append(secs, fmt.Sprintf("%.1f s at %s keys", m.Seconds, FormatRate(float64(m.Keys))))
	}
	fmt.Fprintf(b, "\nSteady interval measured, each key over its own (the shortest): %s.\n\n", strings.Join(secs, ", "))
}
