// Package web renders a node's read-only status page: the members, the
// leader and term, and per key its limit, the admitted rate over the last
// 10 s, pauses and slots, with an SVG chart of the rate over the last few
// minutes against the ceiling R.
//
// Everything is rendered on the server with html/template: no JavaScript,
// no external assets. The page refreshes itself every RefreshSeconds.
// Machine-readable numbers are in data-* attributes (data-key, data-rate,
// data-burst, data-admitted10s, data-granted10s, ... on the table cells;
// data-key, data-ceiling, data-series on each chart), so tests and scripts
// can read them from the DOM.
//
// It is one of the agent's surfaces (agent/admin, agent/metrics, agent/web):
// it reads a node through the Node interface and imports node/report (the
// shapes of its Status and History) only; node, the worker side and the
// leaf libraries under internal/ never import it.
package web

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftpace/raftpace/node/report"
)

// Node is what the page reads. *node.Node implements it.
type Node interface {
	Status(ctx context.Context) (report.Status, error)
	History(secs int) []report.KeyHistory
}

const (
	// ChartSeconds is the span of each key's chart.
	ChartSeconds = 180
	// RefreshSeconds is the page's auto-refresh period.
	RefreshSeconds = 5
)

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Parse(pageHTML))

// Handler serves the page at any path it is mounted on (GET and HEAD).
func Handler(n Node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st, err := n.Status(ctx)
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		var buf bytes.Buffer
		if err := Render(&buf, st, n.History(ChartSeconds), time.Now()); err != nil {
			http.Error(w, "rendering: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		w.Write(buf.Bytes())
	})
}

// Render writes the page of st and hist (the node's History) to w.
func Render(w *bytes.Buffer, st report.Status, hist []report.KeyHistory, now time.Time) error {
	return page.Execute(w, build(st, hist, now))
}

// view is the template's data.
type view struct {
	Refresh     int
	Now         string
	St          report.Status
	State       string
	Leader      string
	Ready       bool
	ReadyReason string
	Members     []memberView
	Keys        []keyView
	Charts      []chartView
	Leading     bool
	Fraction    string
	Held        string
}

type memberView struct {
	ID, Addr, Role, Health, Mode, Share, Fraction, LastContact, LastContactNs string
	Leader, Self                                                              bool
}

type keyView struct {
	Key                       string
	HasLimit                  bool
	Rate, Burst               string // machine-readable
	RateText                  string
	DryRun                    bool   // the limit admits everything (data-dry-run)
	Admitted10s, Granted10s   string // machine-readable
	AdmittedText, GrantedText string
	Paused                    bool
	PauseSec, PauseText       string
	HasCap                    bool
	InUse, Max                string
}

type chartView struct {
	Key, Series, Caption            string
	Width, Height                   int
	Left, Right, Top, Bottom        int
	Ceiling                         string // machine-readable R
	CeilingY                        string
	CeilingLabel                    string
	Points                          string
	YMax, YMaxY                     string
	Ticks                           []tick
	Last, Mean                      string
	Seconds                         int
	PlotLeft, PlotRight, PlotBottom int
}

type tick struct {
	X     string
	Label string
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func rateText(v float64) string {
	switch {
	case v == 0:
		return "0/s"
	case v >= 100:
		return fmt.Sprintf("%.0f/s", v)
	case v >= 10:
		return fmt.Sprintf("%.1f/s", v)
	}
	return fmt.Sprintf("%.3g/s", v)
}

func build(st report.Status, hist []report.KeyHistory, now time.Time) view {
	v := view{Refresh: RefreshSeconds, Now: now.UTC().Format(time.RFC3339), St: st, Leading: st.Granting,
		Fraction: num(round(st.Fraction, 4)), Held: num(round(st.HeldFraction, 4))}
	v.State = st.State
	if st.Granting {
		v.State += ", granting"
	}
	v.Leader = st.Leader
	if v.Leader == "" {
		v.Leader = "(none)"
	}
	v.Ready, v.ReadyReason = st.Ready()
	for _, m := range st.Members {
		mv := memberView{ID: m.ID, Addr: m.Addr, Role: m.Role, Health: m.Health, Mode: m.Mode, Leader: m.Leader, Self: m.ID == st.ID,
			Fraction: num(round(m.Fraction, 4))}
		if st.Granting {
			mv.Share = "not held"
			if m.ShareHeld {
				mv.Share = "held"
			}
		}
		if m.LastContact > 0 {
			mv.LastContact = m.LastContact.Round(time.Millisecond).String()
			mv.LastContactNs = strconv.FormatInt(int64(m.LastContact), 10)
		}
		v.Members = append(v.Members, mv)
	}

	keys := map[string]*keyView{}
	get := func(k string) *keyView {
		if keys[k] == nil {
			keys[k] = &keyView{Key: k}
		}
		return keys[k]
	}
	lims := map[string]report.LimitStatus{}
	for _, l := range st.Limits {
		kv := get(l.Key)
		kv.HasLimit = true
		kv.Rate, kv.Burst, kv.RateText = num(l.Rate), strconv.Itoa(l.Burst), rateText(l.Rate)
		if l.DryRun {
			kv.DryRun, kv.RateText = true, kv.RateText+" (dry run)"
		}
		kv.Admitted10s, kv.AdmittedText = num(l.Admitted10s), rateText(l.Admitted10s)
		kv.Granted10s, kv.GrantedText = num(l.Granted10s), rateText(l.Granted10s)
		lims[l.Key] = l
	}
	for _, p := range st.Pauses {
		kv := get(p.Key)
		kv.Paused = true
		kv.PauseSec = num(p.Remaining.Seconds())
		kv.PauseText = p.Remaining.Round(100 * time.Millisecond).String()
	}
	for _, c := range st.Caps {
		kv := get(c.Key)
		kv.HasCap = true
		kv.InUse, kv.Max = strconv.Itoa(c.InUse), strconv.Itoa(c.Max)
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v.Keys = append(v.Keys, *keys[k])
	}

	byKey := map[string]report.KeyHistory{}
	for _, h := range hist {
		byKey[h.Key] = h
	}
	for _, k := range names {
		l, ok := lims[k]
		if !ok {
			continue
		}
		h := byKey[k]
		series, name := h.Admitted, "admitted"
		caption := "admitted by this node's callers"
		if st.Granting {
			series, name = h.Granted, "granted"
			caption = "granted by this leader to the whole fleet (leased slots included)"
		}
		v.Charts = append(v.Charts, chart(k, name, caption, l.Rate, series))
	}
	return v
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// chart lays out one key's rate chart: series are per-second counts, the
// oldest first, the last whole second last.
func chart(key, name, caption string, rate float64, series []uint64) chartView {
	const width, height = 640, 160
	const left, right, top, bottom = 48, 12, 10, 22
	c := chartView{Key: key, Series: name, Caption: caption, Width: width, Height: height,
		Left: left, Right: right, Top: top, Bottom: bottom, Ceiling: num(rate), Seconds: ChartSeconds,
		PlotLeft: left, PlotRight: width - right, PlotBottom: height - bottom}
	// The chart always spans ChartSeconds: missing seconds (a node that
	// just started) are zero on the left.
	vals := make([]float64, ChartSeconds)
	off := ChartSeconds - len(series)
	for i, s := range series {
		if i+off >= 0 {
			vals[i+off] = float64(s)
		}
	}
	peak := rate
	var sum float64
	for _, x := range vals {
		peak = max(peak, x)
		sum += x
	}
	ymax := niceCeil(peak * 1.15)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	y := func(v float64) float64 { return float64(top) + plotH*(1-v/ymax) }
	x := func(i int) float64 { return float64(left) + plotW*float64(i)/float64(ChartSeconds-1) }
	pts := make([]string, len(vals))
	for i, v := range vals {
		pts[i] = fmt.Sprintf("%.1f,%.1f", x(i), y(v))
	}
	c.Points = strings.Join(pts, " ")
	c.CeilingY = fmt.Sprintf("%.1f", y(rate))
	c.CeilingLabel = "R " + rateText(rate)
	c.YMax = rateText(ymax)
	c.YMaxY = fmt.Sprintf("%.1f", float64(top)+4)
	for s := ChartSeconds; s >= 0; s -= 60 {
		label := fmt.Sprintf("-%dm", s/60)
		if s == 0 {
			label = "now"
		}
		c.Ticks = append(c.Ticks, tick{X: fmt.Sprintf("%.1f", x(max(0, ChartSeconds-1-s))), Label: label})
	}
	c.Last = rateText(vals[len(vals)-1])
	c.Mean = rateText(sum / float64(len(vals)))
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
