package report

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	svgWidth   = 860
	svgPanelH  = 280
	svgLeft    = 70
	svgRight   = 250 // room for the legend
	svgTop     = 40
	svgBottom  = 40
	svgPlotW   = svgWidth - svgLeft - svgRight
	svgPlotH   = svgPanelH - svgTop - svgBottom
	svgLegendX = svgWidth - svgRight + 20
)

var seriesColor = map[string]string{
	"raftpace":   "#1f77b4",
	"raftpace-8": "#17becf",
	"postgres":   "#d62728",
	"redis":      "#ff7f0e",
	"xrate":      "#2ca02c",
	"xrate-solo": "#8c564b",
	"gubernator": "#9467bd",
}

// SVG draws, for each ceiling, the admitted rate over time of every
// approach (SeriesStep buckets averaged over the trailing SeriesSmooth)
// with the ceiling as a dashed line: a hand-written SVG document.
func (r *Report) SVG() string {
	rates := r.ceilingRates()
	h := svgPanelH * max(len(rates), 1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, h, svgWidth, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, h)
	if len(rates) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no ceiling was measured</text>`+"\n", svgLeft, svgTop)
	}
	for i, rate := range rates {
		r.svgPanel(&b, rate, float64(i*svgPanelH))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func (r *Report) svgPanel(b *strings.Builder, rate, y0 float64) {
	var runs []*CeilingResult
	for _, id := range rowOrder {
		for _, c := range r.Ceilings {
			if c.Rate == rate && c.ID == id {
				runs = append(runs, c)
			}
		}
	}
	// Axes: time to the longest series; rate to a round number above the
	// ceiling and what was admitted (at most 4x the ceiling: higher values
	// are drawn at the top edge).
	n, peak := 0, 0.0
	for _, c := range runs {
		n = max(n, len(c.Series))
		for _, v := range c.Series {
			peak = max(peak, v)
		}
	}
	tmax := math.Max(float64(n)*SeriesStep.Seconds(), 1)
	ymax := niceCeil(math.Min(math.Max(peak, rate)*1.1, 4*rate))
	x := func(t float64) float64 { return svgLeft + t/tmax*svgPlotW }
	y := func(v float64) float64 { return y0 + svgTop + svgPlotH - math.Min(v, ymax)/ymax*svgPlotH }

	fmt.Fprintf(b, `<g id="ceiling-%s">`+"\n", FormatRate(rate))
	fmt.Fprintf(b, `<text x="%d" y="%.0f" font-size="14" font-weight="bold">Admitted rate, ceiling %s/s (burst 1, demand %s/s)</text>`+"\n",
		svgLeft, y0+22, FormatRate(rate), FormatRate(CeilingDemand*rate))
	// Grid and y labels.
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", svgLeft, y(v), svgLeft+svgPlotW, y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s/s</text>`+"\n", svgLeft-6, y(v)+4, fmtTick(v))
	}
	// x labels: about 6 ticks on whole seconds.
	stepT := math.Max(1, math.Ceil(tmax/6))
	for t := 0.0; t <= tmax+1e-9; t += stepT {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`+"\n", x(t), y0+svgTop+svgPlotH+16, t)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", svgLeft, y0+svgTop, svgPlotW, svgPlotH)
	// The ceiling.
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
		svgLeft, y(rate), svgLeft+svgPlotW, y(rate))
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">ceiling</text>`+"\n", svgLeft+svgPlotW-4, y(rate)-4)
	// The series, raftpace's last so that it is drawn on top, and the
	// legend in table order.
	for i := range runs {
		c := runs[len(runs)-1-i]
		if len(c.Series) == 0 {
			continue
		}
		var pts strings.Builder
		for j, v := range c.Series {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(float64(j+1)*SeriesStep.Seconds()), y(v))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", colorOf(c.ID), strings.TrimSpace(pts.String()))
	}
	for i, c := range runs {
		ly := y0 + svgTop + 10 + float64(i)*34
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", svgLegendX, ly, svgLegendX+18, ly, colorOf(c.ID))
		fmt.Fprintf(b, `<text x="%d" y="%.1f">%s</text>`+"\n", svgLegendX+24, ly+4, html.EscapeString(shortLabel(c.ID)))
		note := fmt.Sprintf("%.1f%% admitted", c.AdmittedPct)
		if c.WindowsOver > 0 {
			note += ", windows over"
		}
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="11" fill="#555">%s</text>`+"\n", svgLegendX+24, ly+18, html.EscapeString(note))
	}
	b.WriteString("</g>\n")
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

func colorOf(id string) string {
	if c := seriesColor[id]; c != "" {
		return c
	}
	return "#444"
}

// shortLabel is an approach's name in the chart's legend.
func shortLabel(id string) string {
	switch id {
	case "raftpace":
		return "raftpace"
	case "raftpace-8":
		return "raftpace, 8 processes"
	case "postgres":
		return "Postgres pacer"
	case "redis":
		return "Redis GCRA Lua"
	case "xrate":
		return "x/time/rate, 1 process"
	case "xrate-solo":
		return "x/time/rate, 3 alone"
	case "gubernator":
		return "gubernator GLOBAL"
	}
	return RowLabel(id)
}

// fmtTick formats an axis value with up to 3 significant digits: 12.5,
// 1.25k, 375k, 2.5M.
func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
