package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/bench/load"
)

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

// FormatCount formats a count or rate: 980, 13k, 1.2 M.
func FormatCount(x float64) string {
	switch {
	case x < 1e3:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x < 1e6:
		return trimNum(x/1e3) + "k"
	}
	return trimNum(x/1e6) + " M"
}

// FormatRate formats a rate with thousands separators: 7, 1,000, 100,000.
func FormatRate(x float64) string {
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

// LatencySummary is the latency figures of one key's load in one line, for
// progress output.
func LatencySummary(kl *load.KeyLoad) string {
	return fmt.Sprintf("p50 %s p99 %s, %s reservations/s", fmtDur(kl.P50), fmtDur(kl.P99), FormatCount(float64(kl.Calls)/math.Max(kl.Seconds(), 1e-9)))
}

// Summary is the run's figures in one line, for progress output.
func (c *CeilingResult) Summary() string {
	s := fmt.Sprintf("%.1f%% of %s/s", c.AdmittedPct, FormatRate(c.Rate))
	if w := c.Window(time.Second); w != nil {
		s += fmt.Sprintf(", worst 1s window %d / bound %.1f", w.Max, w.Bound)
	}
	if c.WindowsOver > 0 {
		s += fmt.Sprintf(", OVER at %d of %d window lengths", c.WindowsOver, len(c.Windows))
	}
	return s
}

// Summary is the run's figures in one line, for progress output.
func (m *ManyKeysResult) Summary() string {
	s := fmt.Sprintf("%.1f%% of %s x %s/s, worst key %s %.1f%%, %d below 95%%, %d admitting nothing, %d windows over, %.1f s measured",
		m.AdmittedPct, FormatRate(float64(m.Keys)), FormatRate(m.Rate), m.WorstKey, m.WorstPct, m.Below95, m.Idle, m.WindowsOver, m.Seconds)
	if m.Errors > 0 {
		s += fmt.Sprintf(", %d failed calls", m.Errors)
	}
	if m.CPUPerEventUs > 0 {
		s += fmt.Sprintf(", agents' CPU %.0f us per event", m.CPUPerEventUs)
	}
	if len(m.AgentSharePct) > 0 {
		s += ", events per agent " + m.agentShares()
	}
	return s
}

// agentShares is AgentSharePct as "96.0% / 2.0% / 1.9%".
func (m *ManyKeysResult) agentShares() string {
	parts := make([]string, len(m.AgentSharePct))
	for i, pct := range m.AgentSharePct {
		parts[i] = fmt.Sprintf("%.1f%%", pct)
	}
	return strings.Join(parts, " / ")
}

func (w *WideKeysResult) Summary() string {
	s := fmt.Sprintf("%s keys used once in %.1f s; leader RSS %s -> %s (peak %s), %.0f%% of a core; %d in memory, %d horizons; a follower's restart: ready %.2f s, all horizons %.2f s",
		FormatRate(float64(w.Keys)), w.CreateSecs, mib(w.RSSBefore), mib(w.RSSAfter), mib(w.RSSPeak), 100*w.LeaderCPU,
		w.KeysInMemory, w.Horizons, w.RestartReadySecs, w.RestartCaughtSecs)
	if w.CollectedSecs >= 0 {
		s += fmt.Sprintf("; all collected %.0f s after last use (RSS then %s)", w.CollectedSecs, mib(w.RSSCollected))
	} else {
		s += "; NOT collected within the wait"
	}
	if w.Failed > 0 {
		s += fmt.Sprintf("; %d reservations failed", w.Failed)
	}
	return s
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
