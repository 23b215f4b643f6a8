package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// Observability as an operator meets it: the status page in a real browser,
// /metrics against the timeline, and the agent's JSON logs.

const (
	obsKey  = "obs"
	obsRate = 50.0
	// obsLoad is how long the load runs (--load-duration): long enough for
	// the page to show a full 10 s window of admitted events while the
	// load still runs, then it stops so that counters and timeline are
	// final.
	obsLoad = 30 * time.Second
)

// TestObserveAgent runs one agent (a single-node cluster) with a load of 4
// workers on a key limited to 50/s, reads its status page in headless
// Chromium while the load runs, then, once the load has stopped, checks
// its /metrics against the timeline it wrote.
func TestObserveAgent(t *testing.T) {
	// A use-by grace of 250 ms (default 50 ms): on a busy test host (the
	// race detector, a browser, other suites) a worker that wakes more than
	// 50 ms late forfeits its slot, and the admitted rate would measure the
	// host's scheduling rather than the pacing the page reports.
	c := startCluster(t, 1, agentOpts{loads: []string{obsKey + ":4"},
		extra: []string{"--load-duration", obsLoad.String(), "--use-grace", "250ms"}})
	a := c.agents[0]
	a.mustCLI("limit", "set", obsKey, "--rate", fmt.Sprint(obsRate))
	loadFrom := time.Now()
	base := "http://" + a.addrs.HTTPAddr

	// Polled, as a probe would: the leader answers 503 until its barrier
	// has applied, which may come after the limit above committed.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := obsGet(t, base+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 10s: %d %s", code, body)
		}
	}

	t.Run("page", func(t *testing.T) {
		browser := chromium(t)
		// Admitted10s is over the last 10 whole seconds: give the load 12.
		time.Sleep(time.Until(loadFrom.Add(12 * time.Second)))
		dom := dumpDOM(t, browser, base+"/")
		if time.Since(loadFrom) > obsLoad {
			t.Fatalf("the browser took until %v after the load started: the load had stopped", time.Since(loadFrom))
		}
		els := domElements(dom)
		rate := domNumber(t, els, obsKey, "data-rate")
		admitted := domNumber(t, els, obsKey, "data-admitted10s")
		granted := domNumber(t, els, obsKey, "data-granted10s")
		t.Logf("page: rate=%v admitted10s=%v granted10s=%v (fleet-wide, this node leads)", rate, admitted, granted)
		if rate != obsRate {
			t.Errorf("data-rate %v, want the limit %v", rate, obsRate)
		}
		if math.Abs(admitted-obsRate) > 0.15*obsRate {
			t.Errorf("admitted over 10 s %v/s, want within 15%% of %v/s (the load exceeds the limit)", admitted, obsRate)
		}
		var line map[string]string
		for _, e := range els {
			if e["<tag"] == "polyline" && e["data-key"] == obsKey {
				line = e
			}
		}
		if line == nil {
			t.Fatalf("no polyline for %s in the DOM:\n%s", obsKey, dom)
		}
		pts := strings.Fields(line["points"])
		var ys []float64
		for _, p := range pts {
			xy := strings.Split(p, ",")
			if len(xy) != 2 {
				t.Fatalf("bad point %q", p)
			}
			x, errX := strconv.ParseFloat(xy[0], 64)
			y, errY := strconv.ParseFloat(xy[1], 64)
			if errX != nil || errY != nil || x < 0 || y < 0 {
				t.Fatalf("bad point %q", p)
			}
			ys = append(ys, y)
		}
		// SVG y grows downwards: the baseline (0/s) is the largest y.
		baseline, minY := slices.Max(ys), slices.Min(ys)
		nonzero := 0
		for _, y := range ys {
			if y < baseline {
				nonzero++
			}
		}
		if len(pts) < 2 || nonzero < 10 {
			t.Errorf("polyline: %d points, %d off the baseline; want a chart with the load in it", len(pts), nonzero)
		}
		// The series peaks near the ceiling line (R, dashed).
		var ceiling map[string]string
		for _, e := range els {
			if e["<tag"] == "line" && e["data-ceiling"] != "" {
				ceiling = e
			}
		}
		if ceiling == nil || ceiling["data-ceiling"] != fmt.Sprint(obsRate) {
			t.Fatalf("no ceiling line at %v: %v", obsRate, ceiling)
		}
		t.Logf("chart: %d points, %d with events, top y %.1f, ceiling y %s", len(pts), nonzero, minY, ceiling["y1"])
	})

	st := a.mustCLI("status")
	t.Logf("raftpace status:\n%s", st)
	if !strings.Contains(st, "FLEET 10s") || !strings.Contains(st, obsKey+"  50/s") {
		t.Errorf("status:\n%s", st)
	}

	t.Run("metrics", func(t *testing.T) {
		// --load-duration ends the load; once it has logged that, every
		// worker has returned: the timeline and the counters are final.
		waitForLog(t, a, obsLoad+30*time.Second, `"msg":"load: stopped"`)
		code, body := obsGet(t, base+"/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		m := parseExposition(t, body)
		granted := m.get(t, "raftpace_reservations_total", "key", obsKey, "outcome", "granted")
		events := m.get(t, "raftpace_granted_events_total", "key", obsKey)
		forfeited := m.get(t, "raftpace_forfeited_total")
		refused := m.get(t, "raftpace_reservations_total", "key", obsKey, "outcome", "refused")
		failed := m.get(t, "raftpace_reservations_total", "key", obsKey, "outcome", "error")
		waits := m.get(t, "raftpace_reservation_wait_seconds_count")
		waitSum := m.get(t, "raftpace_reservation_wait_seconds_sum")

		evs, err := timeline.ParseFiles(a.timeline)
		if err != nil {
			t.Fatal(err)
		}
		recorded := 0
		for _, e := range evs {
			if e.Node == a.id && e.Key == obsKey {
				recorded++
			}
		}
		t.Logf("metrics: granted=%v (events %v) forfeited=%v refused=%v error=%v; timeline: %d events of %s by %s; mean wait %.1f ms",
			granted, events, forfeited, refused, failed, recorded, obsKey, a.id, 1000*waitSum/waits)
		if recorded < int(0.5*obsRate*obsLoad.Seconds()) {
			t.Errorf("only %d events in the timeline for a %v load at %v/s", recorded, obsLoad, obsRate)
		}
		// Every granted reservation was either used (one timeline line)
		// or forfeited (Forfeit): by a worker asleep until its slot when
		// the load stopped (at most one per worker), or by one that woke
		// past its slot's use-by (a busy host; it reserves again). So
		// granted = timeline + forfeited, exactly.
		if granted != float64(recorded)+forfeited {
			t.Errorf("granted counter %v != timeline events %d + forfeited %v", granted, recorded, forfeited)
		}
		if events != granted {
			t.Errorf("granted events %v != granted reservations %v (every reservation is for one event)", events, granted)
		}
		if waits != granted {
			t.Errorf("wait histogram count %v != granted %v", waits, granted)
		}
		m.get(t, "raftpace_mode", "mode", "raft") // present
		if v := m.get(t, "raftpace_mode", "mode", "raft"); v != 1 {
			t.Errorf("raftpace_mode{mode=raft} = %v", v)
		}
		if v := m.get(t, "raftpace_ready"); v != 1 {
			t.Errorf("raftpace_ready = %v", v)
		}
		if v := m.get(t, "raftpace_horizon_extensions_total"); v < 10 {
			t.Errorf("horizon extensions %v over a %v load", v, obsLoad)
		}
		if v := m.get(t, "raftpace_leases_total"); v < 1 {
			t.Errorf("leases %v", v)
		}
	})
}

// TestObserveLogs runs two agents with --log-format json (the harness's
// default) and checks that every line they wrote is a JSON object and that
// every line of raft and memberlist names its node.
func TestObserveLogs(t *testing.T) {
	c := startCluster(t, 2, agentOpts{})
	c.agents[1].mustCLI("limit", "set", "k", "--rate", "10") // forwarded to the leader
	time.Sleep(2 * time.Second)
	c.stopAll()
	comps := map[string]int{}
	for _, a := range c.agents {
		f, err := os.Open(a.logPath)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		n, noNode := 0, map[string]int{}
		for sc.Scan() {
			line := sc.Bytes()
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			n++
			var rec map[string]any
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Errorf("%s: log line %d is not JSON (%v): %s", a.id, n, err, line)
				continue
			}
			comp, _ := rec["component"].(string)
			comps[comp]++
			if rec["node"] != a.id {
				noNode[comp]++
				if comp == "raft" || comp == "memberlist" {
					t.Errorf("%s: %s line without \"node\":%q: %s", a.id, comp, a.id, line)
				}
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("%s: line without %q: %s", a.id, k, line)
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d lines, all JSON; lines without the node id, by component: %v", a.id, n, noNode)
	}
	t.Logf("lines by component: %v", comps)
	if comps["raft"] == 0 || comps["memberlist"] == 0 {
		t.Errorf("no raft or no memberlist lines (%v): routing not exercised", comps)
	}
}

// chromium returns the path of Debian's chromium. Without it the test is
// skipped, or fails when CI is set.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium is not installed: the status page test needs a headless browser " +
		"(Debian: apt-get install chromium; scripts/test.sh installs it as root)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// dumpDOM loads url in headless chromium and returns the DOM after parsing.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--disable-gpu", "--no-sandbox",
		"--user-data-dir="+t.TempDir(), "--dump-dom", url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, errOut.String())
	}
	t.Logf("chromium loaded %s in %v (%d bytes of DOM)", url, time.Since(start).Round(time.Millisecond), out.Len())
	return out.String()
}

var (
	tagRE  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9]*)((?:\s+[a-zA-Z0-9_:-]+(?:="[^"]*")?)*)\s*/?>`)
	attrRE = regexp.MustCompile(`([a-zA-Z0-9_:-]+)(?:="([^"]*)")?`)
)

// domElements returns every start tag of dom as its attributes (unescaped),
// with the tag name under "<tag".
func domElements(dom string) []map[string]string {
	var out []map[string]string
	for _, m := range tagRE.FindAllStringSubmatch(dom, -1) {
		e := map[string]string{"<tag": strings.ToLower(m[1])}
		for _, a := range attrRE.FindAllStringSubmatch(m[2], -1) {
			e[a[1]] = htmlUnescape(a[2])
		}
		out = append(out, e)
	}
	return out
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&quot;", `"`, "&#34;", `"`, "&lt;", "<", "&gt;", ">", "&#39;", "'", "&amp;", "&").Replace(s)
}

// domNumber returns the number in attribute attr of the element of key.
func domNumber(t *testing.T, els []map[string]string, key, attr string) float64 {
	t.Helper()
	for _, e := range els {
		if v, ok := e[attr]; ok && e["data-key"] == key {
			return mustFloat(t, v)
		}
	}
	t.Fatalf("no element with data-key=%q and %s in the DOM", key, attr)
	return 0
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

func obsGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exposition is a parsed Prometheus text exposition: sample lines by name,
// each with its labels.
type exposition map[string][]sample

type sample struct {
	labels map[string]string
	value  float64
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseExposition parses the text format (version 0.0.4); a line that is
// neither a comment nor a sample fails the test.
func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	e := exposition{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a sample line: %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("bad value in %q", line)
		}
		s := sample{labels: map[string]string{}, value: v}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		e[m[1]] = append(e[m[1]], s)
	}
	return e
}

// get returns the value of name's sample with the given labels (pairs).
func (e exposition) get(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
next:
	for _, s := range e[name] {
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return s.value
	}
	t.Fatalf("/metrics has no %s%v", name, labels)
	return 0
}
