package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The churn suite (issue 11, DESIGN 9): worker processes are cattle. They
// are replaced on every deploy with new names and empty disks, scaled
// down with SIGTERM, and OOM-killed for good; each is a change of the raft
// group's membership and must cost the fleet seconds of rate, never the
// cluster. The scenarios run on the chaos harness (a namespace each, node
// k on 127.0.1.k, key "k" at 50/s burst 5, every node loading it with 4
// closed-loop callers, the merged timelines checked against R*W+B+R*delta
// in windows of 0.5, 1, 2 and 5 s). A replacement always gets a new id
// (node k is "nk", k above every earlier one: a fresh data dir) and joins
// through the running agents.
//
// Each scenario measures the fleet's admitted rate (the sum of every
// agent's timeline) in phases: between one replacement and the next (from
// the SIGTERM or SIGKILL, or from a stated delay after it), after the last
// one, while a member is cut off. The summary table (churn suite) is
// printed after the chaos suite's.
//
// -short runs a, e-pg and f-unsafe (one of each mechanism: a clean leave,
// the witness reclaiming a dead member's fraction, the fence). They need
// root; e and f need the agent's --postgres and PostgreSQL binaries.

// churnPeriod is the time between two replacements of a rolling deploy.
const churnPeriod = 6 * time.Second

// churnAfter is how long the rate is measured after the last replacement.
const churnAfter = 6 * time.Second

// replaceOpts shape a rolling replacement.
type replaceOpts struct {
	period time.Duration // between two replacements
	crash  bool          // SIGKILL the old agent (else SIGTERM, waiting for its exit)
	// measureFrom is how far into each period the measured interval
	// starts (0: from the signal itself).
	measureFrom time.Duration
}

// replaceAll replaces the agents of order one by one, one every period:
// SIGTERM (waiting for a clean exit) or SIGKILL, then a new agent (the
// next free k) joining the running ones. Each returned phase runs from a
// replacement to the next (the last one for a period), its rate wanted at
// recoverFrac of R from measureFrom on.
func (s *scenario) replaceAll(order []*agent, o replaceOpts) []churnPhase {
	s.t.Helper()
	next := 0
	for _, a := range s.c.agents {
		next = max(next, s.index(a)+1)
	}
	verb := "SIGTERM"
	if o.crash {
		verb = "SIGKILL"
	}
	t0 := time.Now()
	var phases []churnPhase
	for i, old := range order {
		sleepUntil(t0.Add(time.Duration(i) * o.period))
		role, tag := "follower", "f"
		switch s.leaderNow() {
		case old.id:
			role, tag = "leader", "l"
		case "":
			role, tag = "no leader known", "?"
		}
		k := next
		next++
		label := fmt.Sprintf("%s>n%d", old.id, k)
		s.step(label, fmt.Sprintf("%s %s (%s), start n%d", verb, old.id, role, k), func() {
			if o.crash {
				old.kill()
			} else {
				old.stop()
			}
			s.t.Logf("%s %s exited (%v)", s.clock(time.Now()), old.id, old.exitErr)
			s.startFresh(k)
		})
		at := s.steps[len(s.steps)-1].at
		if i > 0 {
			phases[i-1].to = at
		}
		phases = append(phases, churnPhase{label: label + "(" + tag + ")", at: at, from: at.Add(o.measureFrom), to: at.Add(o.period), least: recoverFrac})
	}
	return phases
}

// waitAfter returns the phase of churnAfter after the last phase, once it is over.
func (s *scenario) waitAfter(last churnPhase) churnPhase {
	from := last.to
	if from.Before(time.Now()) {
		from = time.Now() // the last replacement took longer than its period
	}
	p := churnPhase{label: "after", from: from, to: from.Add(churnAfter), least: recoverFrac}
	sleepUntil(p.to)
	return p
}

// leaderLast orders the running agents followers first, the leader last.
func (s *scenario) leaderLast() []*agent {
	s.t.Helper()
	return append(s.followers(), s.leader())
}

// leaderFirst orders the running agents the leader first, then the others
// in start order.
func (s *scenario) leaderFirst() []*agent {
	s.t.Helper()
	return append([]*agent{s.leader()}, s.followers()...)
}

func ids(as []*agent) string {
	var r []string
	for _, a := range as {
		r = append(r, a.id)
	}
	return strings.Join(r, ", ")
}

// a. A rolling deploy of three agents: every 6 s one is stopped with
// SIGTERM and a new one (new id, empty data dir) started, followers first,
// the leader last (by then both voters beside it are replacements, which
// must have been promoted). Every 6 s phase, measured from the SIGTERM,
// and the 6 s after the last one admit at least 90% of R; at the end the
// three new agents are the raft configuration (all voters) and agree on a
// leader that holds every share; no window is over the ceiling.
func TestChurn_RollingReplace3(t *testing.T) {
	s := newScenario(t, "churn-a", chaosOpts{short: true})
	order := s.leaderLast()
	t.Logf("replacing %s (the leader last), one every %v", ids(order), churnPeriod)
	phases := s.replaceAll(order, replaceOpts{period: churnPeriod})
	phases = append(phases, s.waitAfter(phases[len(phases)-1]))
	s.settled(10 * time.Second)
	s.expectCeiling(s.churnFinish("rolling deploy of 3 (SIGTERM, new id, empty disk) every 6 s, leader last", phases).chaosResult)
}

// b. The same with five agents (three voters, two nonvoters), the leader
// first (its handover happens while two original voters remain), then the
// others in start order; at the end 3 voters and 2 nonvoters, all new.
func TestChurn_RollingReplace5(t *testing.T) {
	s := newScenario(t, "churn-b", chaosOpts{nodes: 5})
	order := s.leaderFirst()
	t.Logf("replacing %s (the leader first), one every %v", ids(order), churnPeriod)
	phases := s.replaceAll(order, replaceOpts{period: churnPeriod})
	phases = append(phases, s.waitAfter(phases[len(phases)-1]))
	s.settled(10 * time.Second)
	s.expectCeiling(s.churnFinish("rolling deploy of 5 (3 voters + 2 nonvoters; SIGTERM, new id, empty disk) every 6 s, leader first", phases).chaosResult)
}

// c. As a, with SIGKILL instead of SIGTERM and Postgres as the witness:
// every 8 s an agent is killed (followers first, the leader last) and a
// new one started. From 5 s after each kill (the dead member fenced in
// Postgres and its fraction reclaimed, the dead voter replaced by the new
// member) to the next, and for 6 s after the last phase, at least 90% of
// R; at the end the three new agents are the raft configuration. Twenty
// slow keys (1/s, burst 1) run beside k and must reach 72% of their rate
// together in the same phases. They reached 33%, 18%, 0% and 17% of it
// while a fenced member's released third was all the leader held past
// the shares' reach (slots there were paced at it), and after that fix
// still 0% after the leader's kill, where the members' fallback grants
// left the new leader a sixth of F for two seconds and slow keys were
// paced at it (node/DESIGN.md, "A known rise of F"); 100% in every phase
// with both.
func TestChurn_CrashReplace(t *testing.T) {
	needPostgresFlag(t)
	s := newScenario(t, "churn-c", chaosOpts{postgres: true, slowKeys: 20})
	order := s.leaderLast()
	t.Logf("crash-replacing %s (the leader last), one every 8 s", ids(order))
	phases := s.replaceAll(order, replaceOpts{period: 8 * time.Second, crash: true, measureFrom: 5 * time.Second})
	phases = append(phases, s.waitAfter(phases[len(phases)-1]))
	s.settled(10 * time.Second)
	s.expectCeiling(s.churnFinish("crash deploy of 3 (SIGKILL, new id, empty disk) every 8 s, leader last; Postgres", phases).chaosResult)
}

// d. An autoscaler takes five agents down to three: SIGTERM the leader,
// then 4 s later a voter follower. Within 2 s of each SIGTERM the rate is
// at least 90% of R in every 1 s window (to the next stop, and for 6 s
// after the second); at the end the leader lists the three survivors as
// its raft configuration, all voters (the two nonvoters promoted).
func TestChurn_ScaleDown5to3(t *testing.T) {
	s := newScenario(t, "churn-d", chaosOpts{nodes: 5})
	l := s.leader()
	f := s.followers()[0] // n1 or n2: a voter
	stop := func(a *agent, role string) time.Time {
		s.step("stop "+a.id, fmt.Sprintf("SIGTERM %s (%s)", a.id, role), a.stop)
		return s.steps[len(s.steps)-1].at
	}
	t0 := stop(l, "leader")
	sleepUntil(t0.Add(4 * time.Second))
	t1 := stop(f, "voter")
	sleepUntil(t1.Add(6 * time.Second))
	phases := []churnPhase{
		{label: "stop " + l.id + "(l)", at: t0, from: t0.Add(2 * time.Second), to: t1, least: recoverFrac, recoverIn: 2 * time.Second},
		{label: "stop " + f.id + "(v)", at: t1, from: t1.Add(2 * time.Second), to: t1.Add(6 * time.Second), least: recoverFrac, recoverIn: 2 * time.Second},
	}
	s.settled(10 * time.Second)
	s.expectCeiling(s.churnFinish("scale 5 -> 3: SIGTERM the leader, a voter 4 s later", phases).chaosResult)
}

// killForGood SIGKILLs a follower that never comes back and measures the
// rate from then on: the phases are built by the caller from the kill.
func killForGood(t *testing.T, id string, o chaosOpts, churn string, phases func(kill time.Time) []churnPhase) {
	s := newScenario(t, id, o)
	f := s.followers()[0]
	s.step("kill "+f.id, "SIGKILL follower "+f.id+" for good", f.kill)
	kill := s.steps[0].at
	ps := phases(kill)
	end := kill
	for _, p := range ps {
		if p.to.After(end) {
			end = p.to
		}
	}
	sleepUntil(end)
	s.settled(10 * time.Second)
	s.expectCeiling(s.churnFinish(churn, ps).chaosResult)
}

// e. With Postgres as the witness, a follower OOM-killed for good: the
// leader fences it in Postgres and takes its third back, so from 5 s
// after the kill to 15 s after it the fleet admits at least 90% of R; at
// the end the dead member is out of the raft configuration.
func TestChurn_KillForGoodPostgres(t *testing.T) {
	needPostgresFlag(t)
	killForGood(t, "churn-e-pg", chaosOpts{postgres: true, short: true}, "SIGKILL a follower for good; Postgres",
		func(kill time.Time) []churnPhase {
			return []churnPhase{
				{label: "first 5 s", from: kill, to: kill.Add(5 * time.Second)},
				{label: "5-15 s", at: kill, from: kill.Add(5 * time.Second), to: kill.Add(15 * time.Second), least: recoverFrac},
			}
		})
}

// killNoPgFlags shorten the reap so that it happens within the run:
// ReapAfter = share-ttl 1 s + fallback-for 5 s + reap-margin 2 s = 8 s
// after the dead member's last answer (with chaosTimings it is 41 s).
var killNoPgFlags = []string{"--fallback-for", "5s", "--reap-margin", "2s"}

// e, without Postgres: no witness can tell dead from cut off, so DESIGN 5
// stands: the dead member's third stays reserved for it (the fleet admits
// about 2/3 R: 85-110% of it from 2.5 s after the kill until 7 s) until
// the leader reaps it ReapAfter (8 s here) after its last answer; from
// 11 s after the kill on, at least 90% of R again.
func TestChurn_KillForGoodNoPostgres(t *testing.T) {
	killForGood(t, "churn-e-nopg", chaosOpts{extra: killNoPgFlags}, "SIGKILL a follower for good; no Postgres (reap after 1+5+2 s)",
		func(kill time.Time) []churnPhase {
			return []churnPhase{
				{label: "until reaped", from: kill.Add(chaosSettle), to: kill.Add(7 * time.Second), share: 2.0 / 3, least: 0.85, most: 1.1},
				{label: "reaped", from: kill.Add(11 * time.Second), to: kill.Add(17 * time.Second), least: recoverFrac},
			}
		})
}

// cutFromRaft cuts a follower off from every other node (raft and gossip,
// both ways) but not from Postgres, for cut, then heals.
func cutFromRaft(t *testing.T, id string, cut time.Duration, unsafe bool) {
	needPostgresFlag(t)
	o := chaosOpts{postgres: true}
	if unsafe {
		if !agentHasFlag(t, "unsafe-reclaim-without-fence") {
			t.Skip("waiting for --unsafe-reclaim-without-fence: `raftpace agent -h` does not list it in this build")
		}
		o.extra = []string{"--unsafe-reclaim-without-fence"}
		o.short = true
	} else if testing.Short() {
		t.Skip("a 90 s cut: not in -short")
	}
	s := newScenario(t, id, o)
	f := s.followers()[0]
	s.step("cut "+f.id, fmt.Sprintf("cut follower %s off from the other nodes (not from Postgres) for %v", f.id, cut), func() { s.ns.isolate(s.index(f)) })
	t0 := s.steps[0].at
	sleepUntil(t0.Add(cut))
	s.step("heal", "heal", s.ns.heal)
	t1 := s.steps[1].at
	own := churnPhase{label: f.id + " cut", node: f.id, share: 1.0 / 3, from: t0.Add(3 * time.Second), to: t1}
	fleet := churnPhase{label: "fleet cut", from: t0.Add(3 * time.Second), to: t1}
	var healed churnPhase
	if !unsafe {
		// Pooled on a Postgres cursor the cut member paces its third as
		// long as the cut lasts (no --fallback-for stop at 30 s, no reap
		// at 41 s), and the leader keeps the majority's two thirds.
		own.least, own.every, own.nonzero = 0.7, 10*time.Second, true
		fleet.least, fleet.every = recoverFrac, 10*time.Second
		// Back in raft, the member's third stays with the pool until the
		// pool's grants that counted it have run out (its last
		// registration + 3 s + 1 s + UseGrace, node/DESIGN.md): about
		// 2/3 R for some 4-5 s after the heal, by design. Judged from 6 s
		// after the heal.
		s.settled(20 * time.Second)
		healed = churnPhase{label: "healed +6 s", at: t1, from: t1.Add(6 * time.Second), to: t1.Add(12 * time.Second), least: recoverFrac}
		sleepUntil(t1.Add(12 * time.Second))
	} else {
		// Measured, not judged: the twin only has to be caught.
		fleet.label = "fleet cut (4/3 R if unfenced)"
		healed = churnPhase{label: "healed", at: t1, from: t1.Add(2 * time.Second)}
		sleepUntil(t1.Add(5 * time.Second))
	}
	r := s.churnFinish(fmt.Sprintf("cut a follower from raft and gossip, not from Postgres, for %v", cut), []churnPhase{own, fleet, healed})
	if unsafe {
		s.expectBroken(r.chaosResult)
	} else {
		s.expectCeiling(r.chaosResult)
	}
}

// f. A follower cut off from the other nodes but not from Postgres, for
// 90 s (three times --fallback-for 30 s, past ReapAfter 41 s): its own
// timeline admits at least 70% of R/3 in every 10 s window and something
// in every 1 s window from 3 s after the cut to the heal; the fleet admits
// at least 90% of R in every 10 s window of the cut, and from 6 s to 12 s
// after the heal (the pool's reach first runs out); the cluster settles
// with the member back; the ceiling holds.
func TestChurn_CutFromRaftNotPostgres(t *testing.T) {
	cutFromRaft(t, "churn-f", 90*time.Second, false)
}

// f, with the leader reclaiming a silent member's fraction after
// ShareTTL + 1 s without fencing it in Postgres: the cut member, pooled
// through Postgres, spends its third while the leader grants it again.
// Caught (20 s cut).
func TestChurn_CutFromRaftNotPostgresWithoutFenceIsCaught(t *testing.T) {
	cutFromRaft(t, "churn-f-unsafe", 20*time.Second, true)
}

// g. A follower paused (SIGSTOP: a VM paused, a swap storm, a debugger)
// and continued, with Postgres: while it is stopped the leader removes it
// from raft (silent for --failed-server-after), fences it in Postgres and
// forgets it, as it would a dead one. Continued, it must be taken back:
// from 5 s to 15 s after SIGCONT its own timeline admits at least half of
// its third of R, the fleet at least 90% of R from 2 s after SIGCONT, and
// the cluster settles with it back in. Paused 4 s, gossip has only
// suspected it when it continues, so its gossip incarnation is the same;
// paused 6 s, gossip declared it dead, and it rejoins as a new one.
// Before the fix, the 4 s (and 4.5 s) pause left it out for good (0/s,
// never settled): the leader's forget tombstoned it as if it had left, and
// only a new incarnation lifts a tombstone.
func TestChurn_PausedFollowerComesBack(t *testing.T) {
	needPostgresFlag(t)
	for _, pause := range []time.Duration{4 * time.Second, 6 * time.Second} {
		t.Run(pause.String(), func(t *testing.T) {
			s := newScenario(t, fmt.Sprintf("churn-g-%v", pause), chaosOpts{postgres: true, short: true})
			f := s.followers()[0]
			s.step("SIGSTOP", "SIGSTOP follower "+f.id, func() { f.cmd.Process.Signal(syscall.SIGSTOP) })
			time.Sleep(pause)
			s.step("SIGCONT", fmt.Sprintf("SIGCONT %v later", pause), func() { f.cmd.Process.Signal(syscall.SIGCONT) })
			cont := s.steps[1].at
			phases := []churnPhase{
				{label: "fleet after", at: cont, from: cont.Add(2 * time.Second), to: cont.Add(15 * time.Second), least: recoverFrac},
				{label: f.id + " after", node: f.id, from: cont.Add(5 * time.Second), to: cont.Add(15 * time.Second), share: 1.0 / 3, least: 0.5},
			}
			sleepUntil(cont.Add(15 * time.Second))
			s.settled(10 * time.Second) // the raft configuration is the running agents, f among them
			s.expectCeiling(s.churnFinish(fmt.Sprintf("a follower SIGSTOPped %v, Postgres", pause), phases).chaosResult)
		})
	}
}
