package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/bench/load"
)

// Report is what bench.Run measured. It renders as Markdown (Markdown), JSON
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
	// WideKeys is the wide-keys group's result (raftpace only).
	WideKeys *WideKeysResult `json:"wide_keys,omitempty"`
	// Python is clients/python/bench.py's figures (the "python" approach).
	Python   *Python   `json:"python,omitempty"`
	Targets  []Target  `json:"targets"`
	Skipped  []Skip    `json:"skipped,omitempty"`
	Failures []Failure `json:"failures,omitempty"`
}

// SeriesStep is the bucket of the admitted-rate series; SeriesSmooth the
// trailing window it is averaged over.
const (
	SeriesStep   = 100 * time.Millisecond
	SeriesSmooth = time.Second
)

// CeilingDemand is the demand of a ceiling run as a multiple of the
// ceiling: what the bench offers, and what the tables and the chart say it
// offered.
const CeilingDemand = 3

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

// Set records the figures of a run with n callers.
func (r *LatencyRow) Set(n int, kl *load.KeyLoad) {
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
// each key measured over its own steady interval (Seconds: the shortest).
type ManyKeysResult struct {
	Keys      int     `json:"keys"`
	Rate      float64 `json:"rate_per_key"`
	Burst     int     `json:"burst"`
	Processes int     `json:"processes"`
	Template  bool    `json:"template,omitempty"` // the keys' limits came from one template

	Events      int     `json:"steady_events"` // admitted in the steady interval, all keys
	Seconds     float64 `json:"steady_seconds"`
	AdmittedPct float64 `json:"admitted_pct"` // Events as % of the slots a pacer losing none would give
	// AdmittedPctOfSpan is Events as % of each key's Rate times its
	// interval, summed: the figure before AdmittedPct counted slots,
	// about 1% lower at 1/s over 48 s (bench.analyzeManyKeys).
	AdmittedPctOfSpan float64 `json:"admitted_pct_of_span"`
	WorstKey          string  `json:"worst_key"` // the key that admitted the least
	WorstPct          float64 `json:"worst_key_admitted_pct"`
	Below95           int     `json:"keys_below_95_pct"`      // keys that admitted less than 95% of their slots
	Idle              int     `json:"keys_admitting_nothing"` // in the steady interval
	WindowsOver       int     `json:"windows_over"`           // window lengths over the bound, summed over keys

	// AgentSharePct is each agent's share of all the events, in %, in
	// the agents' order: with one worker per key on each agent, a fair
	// cluster gives each about 100/agents.
	AgentSharePct []float64 `json:"agent_share_pct,omitempty"`

	Forfeited uint64 `json:"forfeited"`
	Errors    uint64 `json:"errors"`
	// CPUPerEventUs is the agents' CPU time (all of them, the whole run)
	// per admitted event, in microseconds; 0 when not measured.
	CPUPerEventUs float64 `json:"cpu_us_per_event,omitempty"`
}

// Window returns the check for length w, or nil.
func (c *CeilingResult) Window(w time.Duration) *WindowCheck {
	for i := range c.Windows {
		if c.Windows[i].Window == w {
			return &c.Windows[i]
		}
	}
	return nil
}

// Target is one of the project's performance targets (hot path, follower
// round trip, ceiling at scale) with the figure this run measured.
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

// New returns an empty report of a run started now on this machine.
func New(quick bool) *Report {
	return &Report{
		Date:  time.Now().UTC().Truncate(time.Second),
		Quick: quick,
		Host:  Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()},
	}
}

// Failed reports whether a step of the run failed.
func (r *Report) Failed() bool { return r != nil && len(r.Failures) > 0 }

// Row returns the latency row id, adding it in table order if missing.
func (r *Report) Row(id string) *LatencyRow {
	for _, row := range r.Latency {
		if row.ID == id {
			return row
		}
	}
	row := &LatencyRow{ID: id, Label: RowLabel(id), ByCallers: map[int]*LatencyFigures{}}
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

// RowLabel is the name of the approach (and configuration) id in the
// tables.
func RowLabel(id string) string {
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

// CallersLabel says n callers: "1 caller", "16 callers".
func CallersLabel(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return strconv.Itoa(n) + " callers"
}

// Finish evaluates the targets.
func (r *Report) Finish() {
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
				FormatCount(tp.SlotsPerSec), tp.Followers, tp.Callers/max(tp.Followers, 1), FormatCount(tp.LeasedSlotsPerSec), 100*tp.LeaderCPU),
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

// WideKeysResult is the wide-keys group: many keys made by one template,
// each used once, on a 3-process cluster: what they cost the leader, and
// whether they leave once idle.
type WideKeysResult struct {
	Keys       int     `json:"keys"`
	Processes  int     `json:"processes"`
	CreateSecs float64 `json:"create_seconds"` // wall time to use every key once
	Failed     int     `json:"failed_reservations"`
	// The leader before the keys, at its peak while they were made, and
	// once they were all in memory (VmRSS, bytes).
	RSSBefore int64   `json:"leader_rss_before"`
	RSSPeak   int64   `json:"leader_rss_peak"`
	RSSAfter  int64   `json:"leader_rss_with_keys"`
	LeaderCPU float64 `json:"leader_cpu_fraction"` // of one core while the keys were made
	// Counts the leader reported once the keys were made.
	KeysInMemory int `json:"keys_in_memory"`
	Horizons     int `json:"horizons"`
	// Restart of a follower with every key's horizon in its log: from its
	// start to ready, and to holding every horizon again.
	RestartReadySecs  float64 `json:"follower_restart_ready_seconds"`
	RestartCaughtSecs float64 `json:"follower_restart_all_horizons_seconds"`
	// Idle collection: from the last key's use until the leader kept no
	// key and the state no horizon; -1 when not within the wait.
	CollectedSecs float64 `json:"idle_collected_seconds"`
	RSSCollected  int64   `json:"leader_rss_after_collection"`
}
