package e2e

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// Helpers of the churn suite (churn_test.go), on top of the chaos harness:
// a churn scenario measures the admitted rate in named phases (between
// replacements, after the last one, while a member is cut off) and judges
// each against the least (or most) share of R it must reach.

// churnPhase is an interval of a churn scenario whose admitted rate is
// measured, and judged when least or most is set.
type churnPhase struct {
	label    string
	at       time.Time // the event that opened the phase (for the recovery time); zero: from
	from, to time.Time // the measured interval; to zero: the end of the load
	node     string    // measure only this node's own timeline; "" the fleet's
	share    float64   // the share of R the phase is about (node: its fraction; fleet: 1)
	least    float64   // least admitted rate over the interval, as a fraction of share*R; 0: not judged
	most     float64   // most, as a fraction of share*R; 0: not judged
	// every, when set, applies least to every window of this length in
	// the interval (sliding by 1 s), not only to the whole interval.
	every time.Duration
	// nonzero: no 1 s window of the interval (sliding by 100 ms) may be
	// without an admitted event.
	nonzero bool
	// recoverIn, when set, is the longest the rate may take from at to be
	// at least recoverFrac of R in every 1 s window up to to.
	recoverIn time.Duration
}

// phaseResult is a measured phase.
type phaseResult struct {
	churnPhase
	rate     float64       // over [from, to)
	lowest1s float64       // lowest 1 s window in [from, to)
	lowestW  float64       // with every: the lowest rate over a window of that length
	recov    time.Duration // from at (or from) until every 1 s window is >= 90% of R
	recovOK  bool
	zeroAt   time.Time // with nonzero: the first empty 1 s window
}

func (p phaseResult) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %.1f/s", p.label, p.rate)
	if p.node != "" {
		fmt.Fprintf(&sb, " (%s's own)", p.node)
	}
	if p.least > 0 {
		fmt.Fprintf(&sb, " (want >= %.1f", p.least*p.share*chaosRate)
		if p.every > 0 {
			fmt.Fprintf(&sb, " in every %v window: lowest %.1f", p.every, p.lowestW)
		}
		sb.WriteString(")")
	}
	if p.most > 0 {
		fmt.Fprintf(&sb, " (want <= %.1f)", p.most*p.share*chaosRate)
	}
	fmt.Fprintf(&sb, ", lowest 1 s %.0f", p.lowest1s)
	if p.node == "" && (p.recoverIn > 0 || p.least*p.share >= recoverFrac) {
		if p.recovOK {
			fmt.Fprintf(&sb, ", >= 90%% R in every 1 s window %.1f s after %s", p.recov.Seconds(), p.startName())
		} else {
			fmt.Fprintf(&sb, ", not back at >= 90%% R in every 1 s window")
		}
	}
	return sb.String()
}

func (p churnPhase) startName() string {
	if p.at.IsZero() {
		return "its start"
	}
	return "the event"
}

// churnResult is a finished churn scenario.
type churnResult struct {
	chaosResult // evs and rep (the ceiling); the rest unused
	phases      []phaseResult
}

// startFresh starts a replacement member: node k, a new id with an empty
// data dir, joining the running agents (startNode lists only those).
func (s *scenario) startFresh(k int) *agent {
	s.t.Helper()
	a := s.startNode(k, 0)
	s.t.Logf("%s %s started (new id, empty data dir)", s.clock(time.Now()), a.id)
	return a
}

// leaderNow is the leader one running agent names, "" if none does; it
// does not wait for the agents to agree (see leader for that).
func (s *scenario) leaderNow() string {
	for _, a := range s.c.agents {
		if !a.running() {
			continue
		}
		if st, err := a.status(); err == nil && st.Leader != "" {
			return st.Leader
		}
	}
	return ""
}

// running returns the running agents in start order.
func (s *scenario) running() []*agent {
	var r []*agent
	for _, a := range s.c.agents {
		if a.running() {
			r = append(r, a)
		}
	}
	return r
}

// sleepUntil sleeps until t (at once if t has passed).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// settled waits up to d until every running agent names one leader that
// grants holding every share, every one admits through raft, and the
// leader's raft configuration is exactly the running agents, min(3, n) of
// them voters. It fails the test (not fatally) otherwise.
func (s *scenario) settled(d time.Duration) bool {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := s.convergence()
		if why == "" {
			why = s.membership()
		}
		if why == "" {
			s.t.Logf("%s settled: one leader, every share held, every node in raft mode, raft configuration = the %d running agents", s.clock(time.Now()), len(s.running()))
			return true
		}
		if time.Now().After(deadline) {
			s.t.Errorf("cluster not settled within %v: %s", d, why)
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// membership compares the leader's raft configuration with the running
// agents: "" when they match and min(3, n) are voters.
func (s *scenario) membership() string {
	id := s.leaderNow()
	l := s.c.agent(id)
	if l == nil {
		return fmt.Sprintf("no running leader (%q)", id)
	}
	st, err := l.status()
	if err != nil {
		return err.Error()
	}
	var want, got []string
	for _, a := range s.running() {
		want = append(want, a.id)
	}
	voters := 0
	for _, m := range st.Members {
		if m.Role == "voter" || m.Role == "nonvoter" {
			got = append(got, m.ID)
		}
		if m.Role == "voter" {
			voters++
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Sprintf("leader %s lists raft members %v, running agents are %v (members %+v)", id, got, want, st.Members)
	}
	if voters != min(3, len(want)) {
		return fmt.Sprintf("leader %s lists %d voters, want %d (members %+v)", id, voters, min(3, len(want)), st.Members)
	}
	return ""
}

// churnFinish stops the cluster, checks the merged timelines, measures
// and judges every phase and records the scenario's summary row. The
// ceiling is the caller's to judge (expectCeiling, expectBroken).
func (s *scenario) churnFinish(churn string, phases []churnPhase) churnResult {
	s.t.Helper()
	stop := time.Now()
	s.c.stopAll()
	evs := s.c.events()
	until := stop.Add(-200 * time.Millisecond) // the agents stop their load at SIGTERM
	var r churnResult
	r.evs = evs
	r.rep = check(evs, chaosKey, chaosRate, chaosBurst, s.set.Add(time.Second).UnixNano(), until.UnixNano())
	s.t.Log(r.rep.String())
	s.t.Log("admitted per second (by node), seconds since the limit was set:\n" + s.perSecond(evs, until))
	fleet := keySeries(evs, chaosKey)
	slow := prefixSeries(evs, "s:") // chaosOpts.slowKeys
	for _, p := range phases {
		if p.to.IsZero() || p.to.After(until) {
			p.to = until
		}
		if p.share == 0 {
			p.share = 1
		}
		ser := fleet
		if p.node != "" {
			var own []timeline.Event
			for _, e := range evs {
				if e.Node == p.node {
					own = append(own, e)
				}
			}
			ser = keySeries(own, chaosKey)
		}
		res := phaseResult{churnPhase: p, rate: ser.rate(p.from, p.to), lowest1s: ser.minRate(p.from, p.to)}
		res.recov, res.recovOK = ser.recovery(cmp.Or(p.at, p.from), p.to, recoverFrac*chaosRate)
		if p.every > 0 {
			res.lowestW = math.Inf(1)
			for w := p.from; !w.Add(p.every).After(p.to); w = w.Add(time.Second) {
				res.lowestW = math.Min(res.lowestW, ser.rate(w, w.Add(p.every)))
			}
			if math.IsInf(res.lowestW, 1) {
				res.lowestW = 0
			}
		}
		if p.nonzero {
			for w := p.from; !w.Add(time.Second).After(p.to); w = w.Add(100 * time.Millisecond) {
				if ser.count(w, w.Add(time.Second)) == 0 {
					res.zeroAt = w
					break
				}
			}
		}
		s.t.Logf("phase %s [%s .. %s]", res, s.clock(p.from), s.clock(p.to))
		s.judge(res)
		s.judgeSlow(slow, p)
		r.phases = append(r.phases, res)
	}
	// The slow keys' burst (1) is below the members' count, so while
	// members pace themselves (a leader died) each has a burst of one:
	// their bound is R*W plus one event per member and one for the
	// leader (DESIGN 5, "Degraded bursts"), not R*W + 1.
	degraded := s.o.nodes + 2 // the members, a replacement joining, the leader's own
	for i := range s.o.slowKeys {
		key := fmt.Sprintf("s:%d", i)
		if rep := check(evs, key, slowRate, degraded, s.set.Add(time.Second).UnixNano(), until.UnixNano()); !rep.OK() {
			s.t.Errorf("slow key %s: ceiling exceeded (the degraded bound, burst %d):\n%s", key, degraded, rep.String())
		}
	}
	recordChurn(s, churn, r)
	return r
}

// slowLeast is the part of what a phase asks of k that the slow keys
// must reach together (chaosOpts.slowKeys): a change of membership costs
// each of them up to a slot (a leaver's lease), a sixth of a 6 s phase.
const slowLeast = 0.8

// judgeSlow measures the scenario's slow keys together over a fleet's
// phase that is judged and fails the test below slowLeast of its least.
// slow holds the events of every slow key.
func (s *scenario) judgeSlow(slow series, p churnPhase) {
	s.t.Helper()
	if s.o.slowKeys == 0 || p.least == 0 || p.node != "" {
		return
	}
	share := cmp.Or(p.share, 1)
	all := float64(s.o.slowKeys) * slowRate
	need := slowLeast * p.least * share * all
	got := slow.rate(p.from, p.to)
	s.t.Logf("phase %s: %d slow keys admitted %.1f/s together (%.0f%% of %.0f/s), want >= %.1f/s", p.label, s.o.slowKeys, got, 100*got/all, all, need)
	if got < need {
		s.t.Errorf("phase %s (%s .. %s): the %d slow keys admitted %.1f/s together, want >= %.1f/s (%.0f%% of what k must reach)",
			p.label, s.clock(p.from), s.clock(p.to), s.o.slowKeys, got, need, 100*slowLeast)
	}
}

// judge fails the test for a phase below (or above) what it must reach.
func (s *scenario) judge(p phaseResult) {
	s.t.Helper()
	whose := "the fleet"
	if p.node != "" {
		whose = p.node
	}
	span := fmt.Sprintf("%s .. %s", s.clock(p.from), s.clock(p.to))
	if p.to.Sub(p.from) < time.Second {
		s.t.Errorf("phase %s: only %v measured (%s): the scenario's timing went wrong", p.label, p.to.Sub(p.from), span)
		return
	}
	need := p.least * p.share * chaosRate
	if p.least > 0 && p.rate < need {
		s.t.Errorf("phase %s (%s): %s admitted %.1f/s, want >= %.1f/s (%.0f%% of %s)", p.label, span, whose, p.rate, need, 100*p.least, fracName(p.share))
	}
	if p.least > 0 && p.every > 0 && p.lowestW < need {
		s.t.Errorf("phase %s (%s): %s admitted %.1f/s in its worst %v window, want >= %.1f/s in every one", p.label, span, whose, p.lowestW, p.every, need)
	}
	if most := p.most * p.share * chaosRate; p.most > 0 && p.rate > most {
		s.t.Errorf("phase %s (%s): %s admitted %.1f/s, want <= %.1f/s", p.label, span, whose, p.rate, most)
	}
	if p.nonzero && !p.zeroAt.IsZero() {
		s.t.Errorf("phase %s (%s): %s admitted nothing in the 1 s from %s", p.label, span, whose, s.clock(p.zeroAt))
	}
	if p.recoverIn > 0 && (!p.recovOK || p.recov > p.recoverIn) {
		back := "never"
		if p.recovOK {
			back = fmt.Sprintf("%.2f s after it", p.recov.Seconds())
		}
		s.t.Errorf("phase %s (%s): the fleet's rate was not >= %.0f/s in every 1 s window from %.1f s after the event on (back: %s)",
			p.label, span, recoverFrac*chaosRate, p.recoverIn.Seconds(), back)
	}
}

// The churn summary: one row per scenario, printed after the chaos table.

var (
	churnMu   sync.Mutex
	churnRows []chaosRow
)

func recordChurn(s *scenario, churn string, r churnResult) {
	w1, verdict := ceilingVerdict(r.rep)
	var rates, lows []string
	for _, p := range r.phases {
		rate := fmt.Sprintf("%s %.1f", p.label, p.rate)
		if p.least > 0 {
			rate += fmt.Sprintf(" (>= %.1f)", p.least*p.share*chaosRate)
		}
		if p.most > 0 {
			rate += fmt.Sprintf(" (<= %.1f)", p.most*p.share*chaosRate)
		}
		rates = append(rates, rate)
		lows = append(lows, fmt.Sprintf("%.0f", p.lowest1s))
	}
	line := fmt.Sprintf("| %s | %s | %s | %s | %d / %.1f | %s |",
		s.id, churn, strings.Join(rates, "; "), strings.Join(lows, ", "), w1.MaxCount, w1.Bound, verdict)
	s.t.Log("summary: " + line)
	churnMu.Lock()
	churnRows = append(churnRows, chaosRow{s.id, line})
	churnMu.Unlock()
}

// printChurnSummary prints the rows of the churn scenarios that ran.
func printChurnSummary(w io.Writer) {
	churnMu.Lock()
	defer churnMu.Unlock()
	if len(churnRows) == 0 {
		return
	}
	slices.SortFunc(churnRows, func(a, b chaosRow) int { return cmp.Compare(a.id, b.id) })
	fmt.Fprintf(w, "\nchurn suite: key %q at %v/s, burst %d; windows 0.5, 1, 2, 5 s; delta %v; admitted rates in /s\n", chaosKey, chaosRate, chaosBurst, useGrace)
	fmt.Fprintln(w, "| scenario | churn | admitted per phase (wanted) | lowest 1 s window per phase | worst 1 s window / bound | ceiling |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range churnRows {
		fmt.Fprintln(w, r.line)
	}
}
