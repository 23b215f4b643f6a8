package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node/report"
)

type fakeNode struct {
	st   report.Status
	hist []report.KeyHistory
	err  error
}

func (f fakeNode) Status(context.Context) (report.Status, error) { return f.st, f.err }
func (f fakeNode) History(secs int) []report.KeyHistory {
	out := make([]report.KeyHistory, 0, len(f.hist))
	for _, h := range f.hist {
		h.Admitted = tail(h.Admitted, secs)
		h.Granted = tail(h.Granted, secs)
		out = append(out, h)
	}
	return out
}

func tail(s []uint64, n int) []uint64 {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func get(t *testing.T, h http.Handler, method string) (int, http.Header, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(method, srv.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func constant(n int, v uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func leaderStatus() report.Status {
	return report.Status{
		ID: "n1", State: "Leader", Leader: "n1", Granting: true, Mode: "raft", Fraction: 1.0 / 3, HeldFraction: 2.0 / 3, Term: 7,
		Members: []report.MemberStatus{
			{ID: "n1", Addr: "127.0.0.1:1", Role: "voter", Health: "alive", Leader: true, ShareHeld: true, Mode: "raft", LastContact: 300 * time.Millisecond, Fraction: 1.0 / 3},
			{ID: "n2", Addr: "127.0.0.1:2", Role: "voter", Health: "failed", Mode: "fallback", LastContact: 9 * time.Second, Fraction: 1.0 / 3},
		},
		Limits: []report.LimitStatus{
			{Key: "img", Rate: 20, Burst: 2, Admitted10s: 6.5, Granted10s: 13.3},
			{Key: `a<b>&"c`, Rate: 0.5, Burst: 1},
			{Key: "new", Rate: 5, Burst: 1, DryRun: true},
		},
		Pauses: []report.PauseStatus{{Key: "img", Remaining: 1500 * time.Millisecond}},
		Caps:   []report.CapStatus{{Key: "llm", Max: 4, InUse: 3}},
	}
}

func attr(t *testing.T, page, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("page lacks %s", re)
	}
	return m[1]
}

func TestPage_Leader(t *testing.T) {
	f := fakeNode{st: leaderStatus(), hist: []report.KeyHistory{{Key: "img", Admitted: constant(ChartSeconds, 7), Granted: constant(ChartSeconds, 20)}}}
	code, hdr, page := get(t, Handler(f), http.MethodGet)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`data-node="n1"`, `data-leader="n1"`, `data-term="7"`, `data-mode="raft"`, `data-ready="true"`,
		`data-member="n2"`, `data-health="failed"`, `data-share="held"`, `data-share="not held"`, `data-last-contact-ns="300000000"`,
		`data-key="img" data-rate="20"`, `data-key="img" data-burst="2"`, `data-key="img" data-admitted10s="6.5"`,
		`data-key="img" data-granted10s="13.3"`, `data-key="img" data-pause-remaining="1.5"`,
		`data-key="llm" data-slots-in-use="3" data-slots-max="4"`,
		`Granted (10 s, fleet-wide)`,
		`data-key="a&lt;b&gt;&amp;&#34;c" data-rate="0.5"`, // escaped, never markup
		`data-key="new" data-rate="5" data-dry-run="true">5/s (dry run)<`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, `a<b>`) || strings.Contains(page, "<script") || strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Error("unescaped key, script or external reference in the page")
	}
	// The leader charts the fleet-wide granted series against R.
	series := attr(t, page, `<figure data-key="img" data-series="([a-z]+)"`)
	if series != "granted" {
		t.Errorf("leader's chart series %q, want granted", series)
	}
	pts := strings.Fields(attr(t, page, `<polyline class="rate" data-key="img" data-series="granted" points="([^"]+)"`))
	if len(pts) != ChartSeconds {
		t.Fatalf("%d points, want %d", len(pts), ChartSeconds)
	}
	// 20/s on every second, the ceiling at 20: the line lies on the ceiling.
	ceilY := attr(t, page, `<line class="ceiling" data-ceiling="20" x1="[0-9.]+" y1="([0-9.]+)"`)
	for _, p := range pts {
		if y := strings.Split(p, ",")[1]; y != ceilY {
			t.Fatalf("point %s off the ceiling y=%s", p, ceilY)
		}
	}
	// A key with a limit but no events is charted at zero.
	if !strings.Contains(page, `<figure data-key="a&lt;b&gt;&amp;&#34;c"`) {
		t.Error("no chart for a key without history")
	}
}

func TestPage_Follower(t *testing.T) {
	st := leaderStatus()
	st.ID, st.State, st.Granting, st.HeldFraction = "n2", "Follower", false, 0
	h := report.KeyHistory{Key: "img", Admitted: append(constant(ChartSeconds-10, 0), constant(10, 10)...), Granted: constant(ChartSeconds, 0)}
	_, _, page := get(t, Handler(fakeNode{st: st, hist: []report.KeyHistory{h}}), http.MethodGet)
	if strings.Contains(page, "data-granted10s") || strings.Contains(page, "fleet-wide") {
		t.Error("a follower shows fleet-wide figures")
	}
	pts := strings.Fields(attr(t, page, `<polyline class="rate" data-key="img" data-series="admitted" points="([^"]+)"`))
	first, _ := strconv.ParseFloat(strings.Split(pts[0], ",")[1], 64)
	last, _ := strconv.ParseFloat(strings.Split(pts[len(pts)-1], ",")[1], 64)
	if !(last < first) {
		t.Errorf("own admitted series: last point y %v not above the first %v", last, first)
	}
}

func TestPage_ShortHistory(t *testing.T) {
	// A node that just started has fewer seconds than the chart spans.
	f := fakeNode{st: leaderStatus(), hist: []report.KeyHistory{{Key: "img", Granted: constant(5, 3), Admitted: constant(5, 3)}}}
	_, _, page := get(t, Handler(f), http.MethodGet)
	pts := strings.Fields(attr(t, page, `data-series="granted" points="([^"]+)"`))
	if len(pts) != ChartSeconds {
		t.Fatalf("%d points", len(pts))
	}
}

func TestPage_Errors(t *testing.T) {
	code, _, _ := get(t, Handler(fakeNode{err: errors.New("closed")}), http.MethodGet)
	if code != http.StatusServiceUnavailable {
		t.Errorf("status error: %d", code)
	}
	code, hdr, _ := get(t, Handler(fakeNode{st: leaderStatus()}), http.MethodPost)
	if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d %q", code, hdr.Get("Allow"))
	}
	code, _, body := get(t, Handler(fakeNode{st: leaderStatus()}), http.MethodHead)
	if code != 200 || body != "" {
		t.Errorf("HEAD: %d %q", code, body)
	}
	// No limits: a hint instead of the table.
	st := leaderStatus()
	st.Limits, st.Pauses, st.Caps = nil, nil, nil
	_, _, page := get(t, Handler(fakeNode{st: st}), http.MethodGet)
	if !strings.Contains(page, "No limits set") {
		t.Error("no hint without keys")
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.3, 0.5}, {1, 1}, {1.1, 2}, {23, 50}, {57.5, 100}, {100, 100}, {101, 200}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
