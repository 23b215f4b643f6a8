package report

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/bench/load"
	"github.com/raftpace/raftpace/internal/timeline"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	durs := []struct {
		ns   int64
		want string
	}{
		{0, "0"}, {180, "180 ns"}, {999, "999 ns"}, {1200, "1.2 µs"}, {470_000, "470 µs"},
		{470_000_000, "470 ms"}, {7_300_000, "7.3 ms"}, {2_500_000_000, "2.5 s"}, {999_000, "999 µs"},
		{640, "640 ns"}, {1_000, "1.0 µs"},
	}
	for _, tc := range durs {
		if got := fmtDur(tc.ns); got != tc.want {
			t.Errorf("fmtDur(%d) = %q, want %q", tc.ns, got, tc.want)
		}
	}
	counts := []struct {
		x    float64
		want string
	}{{0, "0"}, {980, "980"}, {1_700, "1.7k"}, {13_400, "13k"}, {2_200_000, "2.2 M"}, {12_000_000, "12 M"}}
	for _, tc := range counts {
		if got := FormatCount(tc.x); got != tc.want {
			t.Errorf("FormatCount(%v) = %q, want %q", tc.x, got, tc.want)
		}
	}
	rates := []struct {
		x    float64
		want string
	}{{7, "7"}, {1000, "1,000"}, {100000, "100,000"}, {2.625, "2.625"}, {1234567, "1,234,567"}}
	for _, tc := range rates {
		if got := FormatRate(tc.x); got != tc.want {
			t.Errorf("FormatRate(%v) = %q, want %q", tc.x, got, tc.want)
		}
	}
	ratios := []struct {
		v, ref float64
		want   string
	}{
		{470, 15, " (x31)"}, {31, 15, " (x2.1)"}, {7, 15, " (x0.47)"}, {2200, 1, " (x2200)"}, {2000, 1.5e6, " (x1/750)"}, {0.996, 1, " (x1.0)"}, {0.99, 1, " (x0.99)"}, {1, 1e4, " (x<1/1000)"},
		{1, 0, ""}, {0, 1, ""},
	}
	for _, tc := range ratios {
		if got := ratio(tc.v, tc.ref); got != tc.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", tc.v, tc.ref, got, tc.want)
		}
	}
}

// delta is the bench's allowance in the ceiling check (bench.Delta).
const delta = 50 * time.Millisecond

// sampleReport is a report as a run would leave it.
func sampleReport() *Report {
	r := New(false)
	r.Date = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	r.Command = "raftpace bench"
	lat := func(id string, n int, p50, p99 time.Duration, calls uint64) {
		r.Row(id).Set(n, &load.KeyLoad{Concurrency: n, Calls: calls, P50: int64(p50), P99: int64(p99), From: 1e9, To: 3e9})
	}
	// Added out of table order on purpose.
	lat("postgres", 1, 470*time.Microsecond, 4*time.Millisecond, 4000)
	lat("postgres", 16, 7300*time.Microsecond, 16*time.Millisecond, 4000)
	lat("raftpace-follower", 1, 200, 300, 2_000_000)
	lat("raftpace-follower", 16, 600, 900, 3_000_000)
	lat("raftpace-follower-noleases", 1, 40*time.Microsecond, 200*time.Microsecond, 50_000)
	lat("raftpace-follower-noleases", 16, 300*time.Microsecond, 2*time.Millisecond, 70_000)
	lat("loopback", 1, 35*time.Microsecond, 90*time.Microsecond, 50_000)
	r.Throughput = &Throughput{Leader: "n1", Followers: 2, Callers: 32, SlotsPerSec: 2.2e6, LeasedSlotsPerSec: 3e6, LeasesPerSec: 127, LeaderCPU: 0.1, Seconds: 4}
	ceil := func(id string, rate, pct float64, worst int, over bool) {
		c := &CeilingResult{ID: id, Rate: rate, Burst: 1, Processes: 3, Concurrency: 16, AdmittedPct: pct, Shed: 1234,
			Series: []float64{rate / 2, rate, rate * 1.01, rate}}
		for _, w := range timeline.DefaultWindows() {
			b := rate*w.Seconds() + 1 + rate*delta.Seconds()
			m := int(b) - 1
			if over {
				m = int(2 * b)
			}
			c.Windows = append(c.Windows, WindowCheck{Window: w, Max: m, Bound: b, Over: over})
			if over {
				c.WindowsOver++
			}
		}
		_ = worst
		r.Ceilings = append(r.Ceilings, c)
	}
	ceil("postgres", 100000, 6.2, 0, false)
	ceil("raftpace", 100000, 99.5, 0, false)
	ceil("raftpace-8", 7, 99.2, 0, false)
	ceil("xrate-solo", 7, 300, 0, true)
	ceil("raftpace", 7, 100, 0, false)
	r.Skipped = []Skip{{Approach: "redis", Reason: "no Redis server answers on 127.0.0.1:6379: connection refused"}}
	r.Finish()
	return r
}

func TestReport_Markdown(t *testing.T) {
	t.Parallel()
	md := sampleReport().Markdown()
	containsAll(t, md,
		"# raftpace bench (full mode)",
		"`raftpace bench`",
		"| raftpace, follower (leases) | 200 ns | 300 ns | 600 ns | 900 ns | 1.5 M |",
		// Postgres: 470 µs is 2350 times raftpace's 200 ns.
		"| Postgres pacer (1 conn + mutex per process) | 470 µs (x2350) | 4.0 ms (x13333) | 7.3 ms (x12167) | 16 ms (x17778) | 2.0k (x1/750) |",
		"| raftpace, follower, no leases | 40 µs (x200) |",
		"2.2 M slots/s",
		"## Ceiling 7/s (burst 1, demand 21/s)",
		"## Ceiling 100,000/s (burst 1, demand 300,000/s)",
		// Bounds: 100000*1 + 1 + 100000*0.05; 7*1 + 1 + 7*0.05.
		"| Postgres pacer (1 conn + mutex per process) | 3 x 16 | 6.2% (x1/16) | 105000 / 105001.0 | 0 of 4 | 1.2k | 0 |",
		"| x/time/rate, 3 processes each alone | 3 x 16 | 300.0% (x3.0) | **16 / 8.3 over** | **4 of 4** | 1.2k | 0 |",
		"- redis: skipped: no Redis server answers",
		"| follower hot path with a lease | p50 <= 1 µs | p50 200 ns (1 caller), 600 ns (16 callers) | yes |",
		"| follower without a lease vs the Postgres pacer | p50 >= 10x lower | 40 µs vs Postgres 470 µs: 11.8x lower (1 caller); 24.3x (16 callers); a bare loopback round trip takes 35 µs | yes |",
		"| (floor) bare loopback TCP round trip, 1 conn + mutex | 35 µs (x175) | 90 µs (x300) | - | - | - |",
		"| 100,000/s ceiling across 3 processes | >= 99% admitted, zero windows over | 99.5% admitted, 0 of 4 window lengths over | yes |",
		"| leader's grants through leases | >= 1,000,000 slots/s |",
		"delta = 50 ms",
	)
	// The ceiling tables come in ascending rate, the rows in table order.
	if i, j := strings.Index(md, "Ceiling 7/s"), strings.Index(md, "Ceiling 100,000/s"); i < 0 || j < i {
		t.Errorf("ceiling tables out of order")
	}
	if i, j := strings.Index(md, "| raftpace (leases) | 3 x 16 | 99.5%"), strings.Index(md, "| Postgres pacer (1 conn + mutex per process) | 3 x 16 | 6.2%"); i < 0 || j < i {
		t.Errorf("raftpace row not first in its ceiling table:\n%s", md)
	}
}

func TestReport_MarkdownRowOrder(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	var ids []string
	for _, row := range r.Latency {
		ids = append(ids, row.ID)
	}
	want := []string{"raftpace-follower", "raftpace-follower-noleases", "postgres", "loopback"}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("rows %v, want %v", ids, want)
	}
}

func TestReport_MarkdownManyKeys(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	if md := r.Markdown(); strings.Contains(md, "## Many slow keys") {
		t.Errorf("many-keys table without results:\n%s", md)
	}
	// Added out of key count order on purpose; the 1,000-key run starved
	// keys and went over.
	r.ManyKeys = []*ManyKeysResult{
		{Keys: 1000, Rate: 2, Burst: 1, Processes: 3, Seconds: 9.2, AdmittedPct: 97.25, WorstKey: "k917", WorstPct: 0, Below95: 40, Idle: 12, WindowsOver: 3, CPUPerEventUs: 141.4, AgentSharePct: []float64{96.04, 2.01, 1.95}},
		{Keys: 10, Rate: 2, Burst: 1, Processes: 3, Seconds: 13.8, AdmittedPct: 99.6, WorstKey: "k3", WorstPct: 96.4},
	}
	md := r.Markdown()
	containsAll(t, md,
		"## Many slow keys (2/s, burst 1, one worker per key per agent, 3 agents)",
		"| keys | admitted (aggregate) | worst key | keys below 95% | keys admitting nothing | windows over | agents' CPU per event | events per agent |\n|---|---|---|---|---|---|---|---|\n",
		"| 10 | 99.6% | 96.4% (k3) | 0 | 0 | 0 | - |  |\n| 1,000 | 97.2% | 0.0% (k917) | 40 | **12** | **3** | 141 us | 96.0% / 2.0% / 1.9% |\n",
		"Steady interval measured, each key over its own (the shortest): 13.8 s at 10 keys, 9.2 s at 1,000 keys.",
	)
	// After the ceiling tables, before the targets.
	if i, j, k := strings.Index(md, "## Ceiling 100,000/s"), strings.Index(md, "## Many slow keys"), strings.Index(md, "## Performance targets"); i > j || j > k {
		t.Errorf("many-keys table out of place:\n%s", md)
	}
	if r.ManyKeys[0].Keys != 1000 {
		t.Error("Markdown reordered the report's results")
	}
}

func TestReport_Targets(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	got := map[string]Target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
	}
	if tg := got["7/s ceiling with 8 worker processes"]; !tg.Met || !tg.Measured {
		t.Errorf("8 processes: %+v", tg)
	}
	// Not met: slow follower without a lease; too few slots through leases.
	r.Row("raftpace-follower-noleases").ByCallers[1].P50 = int64(100 * time.Microsecond)
	r.Throughput.SlotsPerSec = 9e5
	r.Ceilings = nil
	r.Finish()
	got = map[string]Target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
	}
	if tg := got["follower without a lease vs the Postgres pacer"]; tg.Met || !strings.Contains(tg.Got, "4.7x lower") {
		t.Errorf("no-lease target: %+v", tg)
	}
	if tg := got["leader's grants through leases"]; tg.Met {
		t.Errorf("lease throughput target: %+v", tg)
	}
	if tg := got["100,000/s ceiling across 3 processes"]; tg.Measured || tg.Met || tg.Got != "not measured" {
		t.Errorf("unmeasured ceiling: %+v", tg)
	}
}

func TestReport_JSONAndFiles(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if len(back.Latency) != 4 || back.Latency[0].ByCallers[16].P50 != 600 || len(back.Ceilings) != 5 ||
		back.Throughput.SlotsPerSec != 2.2e6 || len(back.Targets) != 5 || back.Skipped[0].Approach != "redis" {
		t.Errorf("round trip lost data: %s", b)
	}
	for _, name := range []string{"report.md", "chart.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestReport_SVG(t *testing.T) {
	t.Parallel()
	svg := sampleReport().SVG()
	// Well-formed XML with one panel per ceiling, a dashed ceiling line
	// and a polyline per series.
	dec := xml.NewDecoder(strings.NewReader(svg))
	counts := map[string]int{}
	dashed := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			for _, a := range se.Attr {
				if a.Name.Local == "stroke-dasharray" {
					dashed++
				}
			}
		}
	}
	if counts["svg"] != 1 || counts["g"] != 2 || counts["polyline"] != 5 || dashed != 2 {
		t.Errorf("elements %v, dashed lines %d", counts, dashed)
	}
	for _, want := range []string{"ceiling 7/s", "ceiling 100,000/s", "x/time/rate, 3 alone", "300.0% admitted, windows over"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if empty := New(true).SVG(); !strings.Contains(empty, "no ceiling was measured") {
		t.Errorf("empty report's SVG: %s", empty)
	}
}

func TestFmtTick(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		want string
	}{{0, "0"}, {12.5, "12.5"}, {37.5, "37.5"}, {1250, "1.25k"}, {375000, "375k"}, {2.5e6, "2.5M"}, {5, "5"}} {
		if got := fmtTick(tc.v); got != tc.want {
			t.Errorf("fmtTick(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ v, want float64 }{
		{0, 1}, {7, 10}, {7.7, 10}, {1100, 2000}, {2100, 2500}, {3000, 5000}, {110000, 200000}, {1000, 1000}, {0.3, 0.5},
	} {
		if got := niceCeil(tc.v); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// containsAll reports every want that md (a rendered report) lacks.
func containsAll(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
