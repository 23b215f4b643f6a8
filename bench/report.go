package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is what Run measured. It renders as Markdown (Markdown), JSON
// (encoding/json) and an SVG chart (SVG).
type Report struct {
	Date    time.Time     `json:"date"`
	Command string        `json:"command,omitempty"`
	Quick   bool          `json:"quick"`
	Host    Host          `json:"host"`
	Elapsed time.Duration `json:"elapsed_ns"`

	// Latency has one row per approach (and raftpace configuration), in
	// table order.
	Latency []*LatencyRow `json:"latency"`
	// Throughput is the leader's lease throughput, when measured.
	Throughput *Throughput `json:"throughput,omitempty"`
	// Ceilings has one result per ceiling run.
	Ceilings []*CeilingResult `json:"ceilings"`
	// ManyKeys has one result per key count of the many-slow-keys group
	// (raftpace only).
	ManyKeys []*ManyKeysResult `json:"many_keys,omitempty"`
	Targets  []Target          `json:"targets"`
	Skipped  []Skip            `json:"skipped,omitempty"`
	Failures []Failure         `json:"failures,omitempty"`
}

// Host describes the machine.
type Host struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
	CPUs int    `json:"cpus"`
	Go   string `json:"go"`
}

// LatencyRow is one approach's reservation latency at an unlimited rate.
type LatencyRow struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	// ByCallers holds the figures per number of concurrent callers.
	ByCallers map[int]*LatencyFigures `json:"by_callers"`
}

// LatencyFigures are the figures of one run: one process, n callers.
type LatencyFigures struct {
	Callers   int     `json:"callers"`
	P50       int64   `json:"p50_ns"`
	P99       int64   `json:"p99_ns"`
	Mean      float64 `json:"mean_ns"`
	Calls     uint64  `json:"calls"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"reservations_per_s"`
	Forfeited uint64  `json:"forfeited,omitempty"`
	Errors    uint64  `json:"errors,omitempty"`
}

// set records the figures of a run with n callers.
func (r *LatencyRow) set(n int, kl *KeyLoad) {
	f := &LatencyFigures{Callers: n, P50: kl.P50, P99: kl.P99, Mean: kl.Mean, Calls: kl.Calls,
		Seconds: kl.Seconds(), Forfeited: kl.Forfeited, Errors: kl.Errors}
	if f.Seconds > 0 {
		f.PerSecond = float64(kl.Calls) / f.Seconds
	}
	r.ByCallers[n] = f
}

// Throughput is the leader's grant throughput through leases: followers
// calling at an unlimited rate, the leader calling nothing itself.
type Throughput struct {
	Leader            string  `json:"leader"`
	Followers         int     `json:"followers"`
	Callers           int     `json:"callers"`             // on all followers
	SlotsPerSec       float64 `json:"slots_used_per_s"`    // reservations served from leases
	LeasedSlotsPerSec float64 `json:"slots_leased_per_s"`  // slots in the leases granted
	LeasesPerSec      float64 `json:"leases_per_s"`        // leases granted
	LeaderCPU         float64 `json:"leader_cpu_fraction"` // of one core, utime+stime over wall time
	Seconds           float64 `json:"seconds"`
}

// CeilingResult is one ceiling run of one approach.
type CeilingResult struct {
	ID          string        `json:"id"`
	Rate        float64       `json:"rate"`
	Burst       int           `json:"burst"`
	Processes   int           `json:"processes"`
	Concurrency int           `json:"callers_per_process"`
	MaxWait     time.Duration `json:"max_wait_ns"`
	Offered     float64       `json:"offered_per_s"` // arrivals/s, all processes

	Events       int     `json:"events"`        // admitted, the whole run
	SteadyEvents int     `json:"steady_events"` // admitted in the steady interval
	Seconds      float64 `json:"steady_seconds"`
	AdmittedPct  float64 `json:"admitted_pct"` // steady admitted rate, % of Rate

	Windows     []WindowCheck `json:"windows"`
	WindowsOver int           `json:"window_lengths_over"`

	Shed      uint64 `json:"shed"`
	ShedQueue uint64 `json:"shed_queue"`
	Forfeited uint64 `json:"forfeited"`
	Errors    uint64 `json:"errors"`

	// Series is the admitted rate (events/s) every SeriesStep from the
	// first process's start, averaged over the trailing SeriesSmooth.
	Series []float64 `json:"series_per_s"`
}

// WindowCheck is the worst window of one length against its bound.
type WindowCheck struct {
	Window time.Duration `json:"window_ns"`
	Max    int           `json:"max"`
	Bound  float64       `json:"bound"`
	Over   bool          `json:"over"`
}

// ManyKeysResult is one many-slow-keys run: Keys keys, each at Rate/s
// burst Burst, one closed-loop worker per key in each of Processes agents,
// measured over one steady interval for all keys.
type ManyKeysResult struct {
	Keys      int     `json:"keys"`
	Rate      float64 `json:"rate_per_key"`
	Burst     int     `json:"burst"`
	Processes int     `json:"processes"`

	Events      int     `json:"steady_events"` // admitted in the steady interval, all keys
	Seconds     float64 `json:"steady_seconds"`
	AdmittedPct float64 `json:"admitted_pct"` // Events as % of Keys*Rate over Seconds
	WorstKey    string  `json:"worst_key"`    // the key that admitted the least
	WorstPct    float64 `json:"worst_key_admitted_pct"`
	Idle        int     `json:"keys_admitting_nothing"` // in the steady interval
	WindowsOver int     `json:"windows_over"`           // window lengths over the bound, summed over keys

	Forfeited uint64 `json:"forfeited"`
	Errors    uint64 `json:"errors"`
}

// window returns the check for length w, or nil.
func (c *CeilingResult) window(w time.Duration) *WindowCheck {
	for i := range c.Windows {
		if c.Windows[i].Window == w {
			return &c.Windows[i]
		}
	}
	return nil
}

// Target is one of issue #3's targets with the figure this run measured.
type Target struct {
	Name     string `json:"name"`
	Want     string `json:"want"`
	Got      string `json:"got"`
	Met      bool   `json:"met"`
	Measured bool   `json:"measured"`
}

// Skip is an approach that was not measured, and why.
type Skip struct {
	Approach string `json:"approach"`
	Reason   string `json:"reason"`
}

// Failure is a step that failed.
type Failure struct {
	Step  string `json:"step"`
	Error string `json:"error"`
}

func newReport(quick bool) *Report {
	return &Report{
		Date:  time.Now().UTC().Truncate(time.Second),
		Quick: quick,
		Host:  Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()},
	}
}

func (r *Report) failed() bool { return r != nil && len(r.Failures) > 0 }

// latency returns the row id, adding it in table order if missing.
func (r *Report) latency(id string) *LatencyRow {
	for _, row := range r.Latency {
		if row.ID == id {
			return row
		}
	}
	row := &LatencyRow{ID: id, Label: rowLabel(id), ByCallers: map[int]*LatencyFigures{}}
	r.Latency = append(r.Latency, row)
	order := func(row *LatencyRow) int { return slices.Index(rowOrder, row.ID) }
	slices.SortStableFunc(r.Latency, func(a, b *LatencyRow) int { return order(a) - order(b) })
	return row
}

// Row ids, in table order.
var rowOrder = []string{
	"raftpace-follower", "raftpace-leader", "raftpace-follower-noleases", "raftpace-leader-noleases",
	"raftpace", "raftpace-8", "postgres", "redis", "xrate", "xrate-solo", "gubernator", "loopback",
}

// The reference rows: every other figure is given as a ratio to theirs.
const (
	latencyRef = "raftpace-follower"
	ceilingRef = "raftpace"
)

func rowLabel(id string) string {
	switch id {
	case "raftpace-follower":
		return "raftpace, follower (leases)"
	case "raftpace-leader":
		return "raftpace, leader (leases)"
	case "raftpace-follower-noleases":
		return "raftpace, follower, no leases"
	case "raftpace-leader-noleases":
		return "raftpace, leader, no leases"
	case "raftpace":
		return "raftpace (leases)"
	case "raftpace-8":
		return "raftpace (leases), 8 processes"
	case "postgres":
		return "Postgres pacer (1 conn + mutex per process)"
	case "redis":
		return "Redis GCRA Lua (1 conn + mutex per process)"
	case "xrate":
		return "x/time/rate, 1 process"
	case "xrate-solo":
		return "x/time/rate, 3 processes each alone"
	case "gubernator":
		return "gubernator v2 GLOBAL (HTTP API)"
	case "loopback":
		return "(floor) bare loopback TCP round trip, 1 conn + mutex"
	}
	return id
}

func callersLabel(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return strconv.Itoa(n) + " callers"
}

// finish evaluates the targets.
func (r *Report) finish() {
	r.Targets = nil
	add := func(name, want string, measured bool, got string, met bool) {
		r.Targets = append(r.Targets, Target{Name: name, Want: want, Got: got, Met: measured && met, Measured: measured})
	}
	fig := func(id string, n int) *LatencyFigures {
		for _, row := range r.Latency {
			if row.ID == id {
				return row.ByCallers[n]
			}
		}
		return nil
	}

	if f := fig("raftpace-follower", 1); f != nil {
		add("follower hot path with a lease", "p50 <= 1 µs", true,
			fmt.Sprintf("p50 %s (1 caller), %s (16 callers)", fmtDur(f.P50), fmtFig(fig("raftpace-follower", 16), func(f *LatencyFigures) string { return fmtDur(f.P50) })),
			f.P50 <= int64(time.Microsecond))
	} else {
		add("follower hot path with a lease", "p50 <= 1 µs", false, "not measured", false)
	}

	nl, pg := fig("raftpace-follower-noleases", 1), fig("postgres", 1)
	if nl != nil && pg != nil && nl.P50 > 0 {
		ratio := float64(pg.P50) / float64(nl.P50)
		got := fmt.Sprintf("%s vs Postgres %s: %.1fx lower (1 caller)", fmtDur(nl.P50), fmtDur(pg.P50), ratio)
		if nl16, pg16 := fig("raftpace-follower-noleases", 16), fig("postgres", 16); nl16 != nil && pg16 != nil && nl16.P50 > 0 {
			got += fmt.Sprintf("; %.1fx (16 callers)", float64(pg16.P50)/float64(nl16.P50))
		}
		if lb := fig("loopback", 1); lb != nil {
			got += fmt.Sprintf("; a bare loopback round trip takes %s", fmtDur(lb.P50))
		}
		add("follower without a lease vs the Postgres pacer", "p50 >= 10x lower", true, got, ratio >= 10)
	} else {
		add("follower without a lease vs the Postgres pacer", "p50 >= 10x lower", false, "not measured (needs raftpace and postgres)", false)
	}

	ceil := func(id string, rate float64) *CeilingResult {
		for _, c := range r.Ceilings {
			if c.ID == id && c.Rate == rate {
				return c
			}
		}
		return nil
	}
	for _, t := range []struct {
		id   string
		rate float64
		name string
	}{
		{"raftpace", 100000, "100,000/s ceiling across 3 processes"},
		{"raftpace-8", 7, "7/s ceiling with 8 worker processes"},
	} {
		c := ceil(t.id, t.rate)
		if c == nil {
			add(t.name, ">= 99% admitted, zero windows over", false, "not measured", false)
			continue
		}
		add(t.name, ">= 99% admitted, zero windows over", true,
			fmt.Sprintf("%.1f%% admitted, %d of %d window lengths over", c.AdmittedPct, c.WindowsOver, len(c.Windows)),
			c.AdmittedPct >= 99 && c.WindowsOver == 0)
	}

	if tp := r.Throughput; tp != nil {
		add("leader's grants through leases", ">= 1,000,000 slots/s", true,
			fmt.Sprintf("%s slots/s used by %d followers x %d callers (%s slots/s leased); leader CPU %.0f%% of one core",
				fmtCount(tp.SlotsPerSec), tp.Followers, tp.Callers/max(tp.Followers, 1), fmtCount(tp.LeasedSlotsPerSec), 100*tp.LeaderCPU),
			tp.SlotsPerSec >= 1e6)
	} else {
		add("leader's grants through leases", ">= 1,000,000 slots/s", false, "not measured", false)
	}
}

func fmtFig(f *LatencyFigures, g func(*LatencyFigures) string) string {
	if f == nil {
		return "-"
	}
	return g(f)
}

// ---- formatting -------------------------------------------------------------

// fmtDur formats ns with 2-3 significant digits: 180 ns, 1.2 µs, 0.47 ms.
func fmtDur(ns int64) string {
	d := float64(ns)
	switch {
	case ns <= 0:
		return "0"
	case d < 1e3:
		return fmt.Sprintf("%.0f ns", d)
	case d < 1e6:
		return trimNum(d/1e3) + " µs"
	case d < 1e9:
		return trimNum(d/1e6) + " ms"
	}
	return trimNum(d/1e9) + " s"
}

// trimNum prints x with 2 significant digits below 10, else whole.
func trimNum(x float64) string {
	switch {
	case x < 1:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case x < 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 0, 64)
}

// fmtCount formats a count or rate: 980, 13k, 1.2 M.
func fmtCount(x float64) string {
	switch {
	case x < 1e3:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x < 1e6:
		return trimNum(x/1e3) + "k"
	}
	return trimNum(x/1e6) + " M"
}

// fmtRate formats a rate with thousands separators: 7, 1,000, 100,000.
func fmtRate(x float64) string {
	if x != math.Trunc(x) || x >= 1e15 {
		return strconv.FormatFloat(x, 'g', 4, 64)
	}
	s := strconv.FormatInt(int64(x), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ratio formats v/ref as " (x31)", " (x2.1)", " (x0.47)", below 0.1 as
// " (x1/750)", below 0.001 as " (x<1/1000)"; "" when either is missing.
func ratio(v, ref float64) string {
	if ref <= 0 || v <= 0 || math.IsNaN(v) || math.IsNaN(ref) {
		return ""
	}
	q := v / ref
	switch {
	case q >= 10:
		return fmt.Sprintf(" (x%.0f)", q)
	case q >= 0.995:
		return fmt.Sprintf(" (x%.1f)", q)
	case q >= 0.1:
		return fmt.Sprintf(" (x%.2f)", q)
	case q >= 0.001:
		return fmt.Sprintf(" (x1/%.0f)", 1/q)
	}
	return " (x<1/1000)"
}

func latSummary(kl *KeyLoad) string {
	return fmt.Sprintf("p50 %s p99 %s, %s reservations/s", fmtDur(kl.P50), fmtDur(kl.P99), fmtCount(float64(kl.Calls)/math.Max(kl.Seconds(), 1e-9)))
}

func ceilingSummary(c *CeilingResult) string {
	s := fmt.Sprintf("%.1f%% of %s/s", c.AdmittedPct, fmtRate(c.Rate))
	if w := c.window(time.Second); w != nil {
		s += fmt.Sprintf(", worst 1s window %d / bound %.1f", w.Max, w.Bound)
	}
	if c.WindowsOver > 0 {
		s += fmt.Sprintf(", OVER at %d of %d window lengths", c.WindowsOver, len(c.Windows))
	}
	return s
}

// ---- Markdown -----------------------------------------------------------------

// Markdown renders the report: the latency table, the ceiling tables, the
// targets, what was skipped, and a legend. Each figure is followed by its
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
			tp.Followers, tp.Callers/max(tp.Followers, 1), fmtCount(tp.SlotsPerSec), fmtCount(tp.LeasedSlotsPerSec),
			fmtCount(tp.LeasesPerSec), 100*tp.LeaderCPU, tp.Seconds)
	}
	for _, rate := range r.ceilingRates() {
		r.ceilingTable(&b, rate)
	}
	if len(r.ManyKeys) > 0 {
		r.manyKeysTable(&b)
	}
	if len(r.Targets) > 0 {
		b.WriteString("## Targets (issue #3)\n\n| target | wanted | measured | met |\n|---|---|---|---|\n")
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
- **Many slow keys** (raftpace only): every key at 2/s, burst 1, each of
  3 agents with one closed-loop worker per key. **admitted** is over one
  steady interval for all keys (from 1 s after the last key's load started
  to when the first stopped) as % of keys x 2/s; **worst key** the key
  that admitted least; **windows over** the window lengths over the bound,
  summed over keys. One event is 1/(2 x seconds) of a key's count (3.6% in
  14 s), and keys whose loads start together run in step: with few keys
  the aggregate can be up to one event per key low with every key paced
  exactly.
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
		fmt.Fprintf(b, " p50, %s | p99, %s |", callersLabel(n), callersLabel(n))
	}
	resN := callers[len(callers)-1]
	fmt.Fprintf(b, " reservations/s, %s |\n|---|", callersLabel(resN))
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
			fmt.Fprintf(b, " %s%s |\n", fmtCount(f.PerSecond), refRatio(f.PerSecond, rf, func(x *LatencyFigures) float64 { return x.PerSecond }))
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
	fmt.Fprintf(b, "## Ceiling %s/s (burst 1, demand %s/s)\n\n", fmtRate(rate), fmtRate(ceilingDemand*rate))
	b.WriteString("| approach | processes x callers | admitted (% of ceiling) | worst 1 s window / bound | lengths over | shed | late |\n|---|---|---|---|---|---|---|\n")
	for _, c := range rows {
		adm := fmt.Sprintf("%.1f%%", c.AdmittedPct)
		if ref != nil && c != ref {
			adm += ratio(c.AdmittedPct, ref.AdmittedPct)
		}
		worst := "-"
		if w := c.window(time.Second); w != nil {
			worst = fmt.Sprintf("%d / %.1f", w.Max, w.Bound)
			if w.Over {
				worst = "**" + worst + " over**"
			}
		}
		over := fmt.Sprintf("%d of %d", c.WindowsOver, len(c.Windows))
		if c.WindowsOver > 0 {
			over = "**" + over + "**"
		}
		fmt.Fprintf(b, "| %s | %d x %d | %s | %s | %s | %s | %s |\n", rowLabel(c.ID), c.Processes, c.Concurrency, adm, worst, over,
			fmtCount(float64(c.Shed)), fmtCount(float64(c.Forfeited)))
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
	fmt.Fprintf(b, "## Many slow keys (%s/s, burst %d, one worker per key per agent, %d agents)\n\n", fmtRate(m.Rate), m.Burst, m.Processes)
	b.WriteString("| keys | admitted (aggregate) | worst key | keys admitting nothing | windows over |\n|---|---|---|---|---|\n")
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
		fmt.Fprintf(b, "| %s | %.1f%% | %.1f%% (%s) | %s | %s |\n", fmtRate(float64(m.Keys)), m.AdmittedPct, m.WorstPct, m.WorstKey, idle, over)
		secs = append(secs, fmt.Sprintf("%.1f s at %s keys", m.Seconds, fmtRate(float64(m.Keys))))
	}
	fmt.Fprintf(b, "\nSteady interval measured: %s.\n\n", strings.Join(secs, ", "))
}

// ---- files ------------------------------------------------------------------

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFiles writes report.md, report.json and chart.svg to dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := r.JSON()
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"report.md":   []byte(r.Markdown()),
		"report.json": js,
		"chart.svg":   []byte(r.SVG()),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
