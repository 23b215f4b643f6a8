// Package render prints what raftpace's admin API answers (a node's
// status, limits, caps) as the aligned tables the operator
// commands show, or as JSON. It promises output that depends only on its
// arguments: keys sorted, rates printed exactly, times rounded as stated.
package render

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/report"
)

// JSON writes v as indented JSON, HTML characters unescaped.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Status prints st as aligned tables: the node, the members, the keys.
func Status(w io.Writer, st report.Status) {
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	state := st.State
	if st.Granting {
		state += ", granting"
	}
	ready, why := st.Ready()
	readiness := "ready"
	if !ready {
		readiness = "NOT READY: " + why
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Node:\t%s (%s)\n", st.ID, state)
	fmt.Fprintf(tw, "Leader:\t%s, term %d\n", leader, st.Term)
	fmt.Fprintf(tw, "Mode:\t%s, %s\n", st.Mode, readiness)
	if st.Granting {
		fmt.Fprintf(tw, "Fractions:\tits own %s, held %s (of each key's rate the leader may grant now)\n", frac(st.Fraction), frac(st.HeldFraction))
	} else {
		fmt.Fprintf(tw, "Fraction:\t%s (its fallback share of each key's rate)\n", frac(st.Fraction))
	}
	fmt.Fprintf(tw, "Applied index:\t%d\n", st.AppliedIndex)
	if st.Granting {
		fmt.Fprintf(tw, "Keys:\t%d in the pacer's memory, %d with a horizon (idle keys leave both)\n", st.KeysInMemory, st.Horizons)
	} else {
		fmt.Fprintf(tw, "Keys:\t%d with a horizon (idle keys leave)\n", st.Horizons)
	}
	fmt.Fprintf(tw, "Addresses:\traft %s, gossip %s\n", st.Addr, st.GossipAddr)
	s := st.Stats
	fmt.Fprintf(tw, "Stats:\tgranted=%d refused=%d unknown_key=%d forwarded=%d late_grants=%d paused_refusals=%d\n",
		s.Granted, s.Refused, s.UnknownKey, s.Forwarded, s.LateGrants, s.PausedRefusals)
	tw.Flush()

	fmt.Fprintf(w, "\nMembers (%d):\n", len(st.Members))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDR\tROLE\tHEALTH\tLEADER\tMODE\tSHARE\tFRACTION\tLAST CONTACT")
	for _, m := range st.Members {
		mark := ""
		if m.Leader {
			mark = "*"
		}
		share, contact := "-", "-"
		if st.Granting {
			share = "not held"
			if m.ShareHeld {
				share = "held"
			}
		}
		if m.LastContact > 0 {
			contact = ago(m.LastContact)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Addr, m.Role, m.Health, mark,
			orDash(m.Mode), share, frac(m.Fraction), contact)
	}
	tw.Flush()
	if !st.Granting && len(st.Members) > 0 {
		fmt.Fprintln(w, "(mode of the other members, share and last contact: the leader's view; ask the leader)")
	}

	keyTable(w, st)
}

// keyTable prints one row per key with a limit, a cap or a pause.
func keyTable(w io.Writer, st report.Status) {
	type row struct {
		lim   *report.LimitStatus
		pause time.Duration
		cap   *report.CapStatus
	}
	rows := map[string]*row{}
	get := func(k string) *row {
		if rows[k] == nil {
			rows[k] = &row{}
		}
		return rows[k]
	}
	for i := range st.Limits {
		get(st.Limits[i].Key).lim = &st.Limits[i]
	}
	for _, p := range st.Pauses {
		get(p.Key).pause = p.Remaining
	}
	for i := range st.Caps {
		get(st.Caps[i].Key).cap = &st.Caps[i]
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(w, "\nKeys (%d):\n", len(keys))
	if len(keys) == 0 {
		fmt.Fprintln(w, "(no limits set: raftpace limit set KEY --rate R)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "KEY\tRATE\tBURST\tADMITTED 10s"
	if st.Granting {
		head += "\tFLEET 10s"
	}
	fmt.Fprintln(tw, head+"\tPAUSED\tSLOTS")
	for _, k := range keys {
		r := rows[k]
		rate, burst, admitted, fleet := "-", "-", "-", "-"
		if r.lim != nil {
			rate, burst = Rate(r.lim.Rate)+"/s"+dryRunMark(r.lim.DryRun), strconv.Itoa(r.lim.Burst)
			admitted, fleet = observed(r.lim.Admitted10s), observed(r.lim.Granted10s)
		}
		pause, slots := "-", "-"
		if r.pause > 0 {
			pause = r.pause.Round(100 * time.Millisecond).String()
		}
		if r.cap != nil {
			slots = fmt.Sprintf("%d/%d", r.cap.InUse, r.cap.Max)
		}
		line := k + "\t" + rate + "\t" + burst + "\t" + admitted
		if st.Granting {
			line += "\t" + fleet
		}
		fmt.Fprintln(tw, line+"\t"+pause+"\t"+slots)
	}
	tw.Flush()
	fmt.Fprint(w, "(ADMITTED 10s: events/s this node admitted over the last 10 s")
	if st.Granting {
		fmt.Fprint(w, "; FLEET 10s: slots/s this leader granted to the whole fleet, leased slots included")
	}
	fmt.Fprintln(w, "; SLOTS: in use/cap; a rate marked (dry run) admits everything)")
}

// quotaMark follows the burst of a limit with a quota.
func quotaMark(l fsm.Limit) string {
	if l.Quota == 0 {
		return ""
	}
	return "\tquota " + l.FormatQuota() + " (UTC)"
}

// dryRunMark follows the rate of a limit in dry run.
func dryRunMark(dryRun bool) string {
	if dryRun {
		return " (dry run)"
	}
	return ""
}

// orDash prints "-" for an empty s.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// observed prints a measured rate with a sensible precision.
func observed(r float64) string {
	switch {
	case r == 0:
		return "0/s"
	case r >= 100:
		return fmt.Sprintf("%.0f/s", r)
	case r >= 10:
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.2f/s", r)
}

// frac prints a fraction to 3 decimals (1/3: 0.333).
func frac(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64) }

// ago prints a duration since a contact, to the millisecond below 10s.
func ago(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String() + " ago"
	}
	return d.Round(time.Second).String() + " ago"
}

// Limits prints an aligned table of limits sorted by key.
func Limits(w io.Writer, lims map[string]fsm.Limit) {
	keys := make([]string, 0, len(lims))
	for k := range lims {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tRATE\tBURST")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s/s%s\t%d%s\n", k, Rate(lims[k].Rate), dryRunMark(lims[k].DryRun), lims[k].Burst, quotaMark(lims[k]))
	}
	tw.Flush()
}

// Rate prints a rate as short as it can be exact (20, 0.5, 1e+06).
func Rate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

// Caps prints an aligned table of concurrency caps sorted by key.
func Caps(w io.Writer, caps []report.CapStatus) {
	sort.Slice(caps, func(i, j int) bool { return caps[i].Key < caps[j].Key })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMAX\tIN USE")
	for _, c := range caps {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", c.Key, c.Max, c.InUse)
	}
	tw.Flush()
}
