package demo

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// formatSecs formats a time since the start in whole seconds, "12s".
func formatSecs(d time.Duration) string {
	return fmt.Sprintf("%ds", int(math.Round(d.Seconds())))
}

// printSecond prints the line of one second: each node's admitted
// rate ("down" while killed), the total and the ceiling; with leader, the
// node that leads and grants ("none" during an election).
func printSecond(w io.Writer, at, span time.Duration, members []*member, prev []uint64, rate float64, leader bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%-3s", formatSecs(at))
	secs := span.Seconds()
	if secs <= 0 {
		secs = 1
	}
	var total uint64
	lead := "none"
	b.WriteString(" ")
	for i, m := range members {
		cur := m.rec.count.Load()
		delta := cur - prev[i]
		prev[i] = cur
		total += delta
		if m.n == nil {
			fmt.Fprintf(&b, " %s=down", m.id())
			continue
		}
		if leader && m.n.IsLeader() {
			lead = m.id()
		}
		fmt.Fprintf(&b, " %s=%.1f/s", m.id(), float64(delta)/secs)
	}
	fmt.Fprintf(&b, "  total=%.1f/s  ceiling=%s/s", float64(total)/secs, formatRate(rate))
	if leader {
		fmt.Fprintf(&b, "  leader=%s", lead)
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

func printVerdict(w io.Writer, rep timeline.KeyReport, elapsed time.Duration, ids []string) {
	var b strings.Builder
	b.WriteString("per node:")
	for _, id := range ids {
		fmt.Fprintf(&b, " %s=%d", id, rep.PerNode[id])
	}
	b.WriteString("\nwindows: ")
	for i, win := range rep.Windows {
		if i > 0 {
			b.WriteString("  ")
		}
		mark := "<="
		if win.Over {
			mark = ">"
		}
		fmt.Fprintf(&b, "%v max %d %s %s", win.Window, win.MaxCount, mark, formatBound(win.Bound))
	}
	b.WriteString("\n")

	// The window to quote: the most over, else the 1s one.
	quote := -1
	for i, win := range rep.Windows {
		if win.Over && (quote < 0 || float64(win.MaxCount)-win.Bound > float64(rep.Windows[quote].MaxCount)-rep.Windows[quote].Bound) {
			quote = i
		}
	}
	ok := quote < 0
	if ok {
		quote = 0
		for i, win := range rep.Windows {
			if win.Window == time.Second {
				quote = i
			}
		}
	}
	rate := formatRate(rep.Limit.Rate)
	summary := fmt.Sprintf("%d events in %.1fs = %.1f/s (%.1f%% of %s/s)",
		rep.Events, elapsed.Seconds(), rep.AchievedRate, 100*rep.Utilisation, rate)
	if len(rep.Windows) == 0 {
		fmt.Fprintf(&b, "verdict: OK — %s\n", summary)
		io.WriteString(w, b.String())
		return
	}
	win := rep.Windows[quote]
	if ok {
		fmt.Fprintf(&b, "verdict: OK — %s; no window over R*W+B+R*delta (delta %v; worst %v window: %d <= %s)\n",
			summary, UseGrace, win.Window, win.MaxCount, formatBound(win.Bound))
	} else {
		fmt.Fprintf(&b, "verdict: CEILING EXCEEDED — %s; worst %v window: %d > %s at t=%.2fs\n",
			summary, win.Window, win.MaxCount, formatBound(win.Bound),
			time.Duration(win.WorstStart-rep.First).Seconds())
	}
	io.WriteString(w, b.String())
}
