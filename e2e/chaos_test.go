package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The chaos suite (issue #4). Each scenario runs real agent processes in a
// network namespace of its own (chaos_harness_test.go, netns_test.go),
// loads key "k" from every node at 50/s for at least 15 s, injects a fault
// under load, heals it, and checks the merged timelines: no window of 0.5,
// 1, 2 or 5 s may hold more than R*W + B + R*delta. It also measures the
// admitted rate during the fault against what DESIGN 5 says it should be,
// and how long after the fault and after its healing the rate is back
// above 90% of R; the summary table is printed at the end of the run.
//
// Scenarios a, c and d have twins with a protection turned off (a new
// leader starting keys at now; fallback at the full rate): the checker
// must catch them, so the passing scenarios mean something. (c's twin is
// skipped while node/ neutralises it; see isolateFollower.) j reproduces a
// ceiling violation found by this suite and runs only on request.
//
// The scenarios need root (network namespaces): without it they skip, or
// fail when CI is set. f and g need the agent's --postgres and PostgreSQL
// binaries (RAFTPACE_PG_BIN, else /usr/lib/postgresql/*/bin).
//
// -short runs a, c and e (and the twins of a and c).

// killLeaderFlags make the non-vacuity of a visible. A closed-loop caller
// holds at most one grant, so the leader's backlog (TAT - now, in status)
// is at most callers/R: sixty callers per node (180 in all, 3.6 s at
// 50/s) fill it; the leader keeps its horizon 1-2 s (--horizon-ahead)
// beyond it. A share TTL longer than the backlog keeps the shares from
// cutting the grants shorter. The kill waits until the backlog is at least
// killBacklog, so the old leader's grants to the survivors run on well past
// the election (~1-1.5 s). A new leader that ignored the inherited horizon
// then grants 2/3 R on top of the survivors' 2/3 R of old grants for about
// two seconds. The protected twin runs with the same flags and pays for
// them: after the election it grants nothing until the inherited horizon,
// 4-5 s after the kill (the lowest 1 s window is 0).
var killLeaderFlags = []string{"--horizon-ahead", "2s", "--share-ttl", "6s"}

const (
	killLoad    = chaosKey + ":60"
	killBacklog = 3 * time.Second
)

func killLeader(t *testing.T, id string, unsafe bool) {
	extra := slices.Clone(killLeaderFlags)
	if unsafe {
		extra = append(extra, "--unsafe-fresh-start")
	}
	s := newScenario(t, id, chaosOpts{load: killLoad, extra: extra, short: true, settle: 6500 * time.Millisecond})
	l := s.leader()
	s.waitBacklog(l, killBacklog, 15*time.Second)
	s.step("kill", "SIGKILL the leader "+l.id, l.kill)
	time.Sleep(9 * time.Second)
	s.step("restart", "restart "+l.id+" 9 s later", func() { s.c.restart(l) })
	s.converged(20 * time.Second)
	r := s.finish(expectation{frac: 2.0 / 3,
		why: "the new leader holds the two survivors' shares; the dead leader's third is spent by nobody until it is back"})
	if unsafe {
		s.expectBroken(r)
	} else {
		s.expectCeiling(r)
	}
}

// waitBacklog waits until leader l has granted key k at least b ahead.
func (s *scenario) waitBacklog(l *agent, b, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, err := l.status()
		if err == nil {
			for _, lim := range st.Limits {
				if lim.Key == chaosKey && lim.Backlog >= b {
					s.t.Logf("%s leader %s: backlog %v, horizon in %v", s.clock(time.Now()), l.id, lim.Backlog, lim.HorizonIn)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("leader %s's backlog for %s did not reach %v within %v: %+v %v", l.id, chaosKey, b, d, st.Limits, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// a. SIGKILL the leader.
func TestChaos_A_KillLeader(t *testing.T) { killLeader(t, "a", false) }

// a, with a new leader that starts every key at now: caught.
func TestChaos_A_KillLeaderFreshStartIsCaught(t *testing.T) { killLeader(t, "a-unsafe", true) }

// b. SIGSTOP the leader for 5 s, then SIGCONT.
func TestChaos_B_PauseLeader(t *testing.T) {
	s := newScenario(t, "b", chaosOpts{})
	l := s.leader()
	s.step("SIGSTOP", "SIGSTOP the leader "+l.id, func() { l.cmd.Process.Signal(syscall.SIGSTOP) })
	time.Sleep(5 * time.Second)
	s.step("SIGCONT", "SIGCONT 5 s later", func() { l.cmd.Process.Signal(syscall.SIGCONT) })
	s.converged(20 * time.Second)
	s.expectCeiling(s.finish(expectation{frac: 2.0 / 3,
		why: "a new leader holds the two others' shares; the paused leader's third is spent by nobody (its callers are paused too)"}))
}

func isolateFollower(t *testing.T, id string, unsafe bool) {
	var extra []string
	if unsafe {
		extra = append(extra, "--unsafe-fallback-full-rate")
	}
	s := newScenario(t, id, chaosOpts{extra: extra, short: true})
	f := s.followers()[0]
	s.step("cut", "cut follower "+f.id+" off from the others", func() { s.ns.isolate(s.index(f)) })
	time.Sleep(10 * time.Second)
	s.step("heal", "heal 10 s later", s.ns.heal)
	s.converged(20 * time.Second)
	r := s.finish(expectation{frac: 1,
		why: "the leader holds the majority's 2/3 of R; the cut follower paces its own 1/3 in fallback"})
	if !unsafe {
		s.expectCeiling(r)
		return
	}
	// The twin needs the majority to go on at 2/3 R while the cut
	// follower paces at R. The cut follower's share answers report its
	// committed fraction, not the full rate it paces at (node/fallback,
	// Renew), so the leader counts its third and the majority goes on at
	// 2/3 R. Had the majority admitted nothing, the twin would be
	// neutralised and show nothing either way: that is a failure of the
	// test, not a skip.
	majority := 0
	for _, e := range r.evs {
		if e.Key == chaosKey && e.Node != f.id && e.At >= s.steps[0].at.Add(chaosSettle).UnixNano() && e.At < s.steps[1].at.UnixNano() {
			majority++
		}
	}
	if majority == 0 {
		t.Fatalf("twin neutralised: the majority admitted nothing while %s was cut, so the twin cannot show the ceiling breaking", f.id)
	}
	s.expectBroken(r)
}

// c. Cut one follower off from all others, then heal.
func TestChaos_C_IsolateFollower(t *testing.T) { isolateFollower(t, "c", false) }

// c, with fallback at the full rate: caught.
func TestChaos_C_IsolatedFollowerAtFullRateIsCaught(t *testing.T) {
	isolateFollower(t, "c-unsafe", true)
}

func leaderInMinority(t *testing.T, id string, unsafe bool) {
	var extra []string
	if unsafe {
		extra = append(extra, "--unsafe-fallback-full-rate")
	}
	s := newScenario(t, id, chaosOpts{extra: extra})
	l := s.leader()
	s.step("cut", "cut the leader "+l.id+" off from the others", func() { s.ns.isolate(s.index(l)) })
	time.Sleep(10 * time.Second)
	s.step("heal", "heal 10 s later", s.ns.heal)
	s.converged(20 * time.Second)
	r := s.finish(expectation{frac: 1,
		why: "the majority's new leader holds 2/3 of R; the old leader, alone, paces its 1/3 in fallback"})
	if unsafe {
		s.expectBroken(r)
	} else {
		s.expectCeiling(r)
	}
}

// d. Cut the leader off into the minority, then heal.
func TestChaos_D_LeaderInMinority(t *testing.T) { leaderInMinority(t, "d", false) }

// d, with fallback at the full rate: caught. (The new leader never heard
// the old one's share answers, so it counts the old leader's committed
// third, unlike c's leader; see isolateFollower.)
func TestChaos_D_LeaderInMinorityAtFullRateIsCaught(t *testing.T) {
	leaderInMinority(t, "d-unsafe", true)
}

// quorumLoss kills the leader and one follower (2 of 3 voters) for 10 s,
// with Postgres stopped as well when pgDown, then restarts them.
func quorumLoss(t *testing.T, id string, o chaosOpts, pgDown bool) {
	s := newScenario(t, id, o)
	l := s.leader()
	f := s.followers()[0]
	desc := fmt.Sprintf("SIGKILL %s (leader) and %s: quorum lost", l.id, f.id)
	if pgDown {
		desc += ", Postgres stopped"
	}
	s.step("kill", desc, func() {
		l.kill()
		f.kill()
		if pgDown {
			s.pg.stop()
		}
	})
	time.Sleep(10 * time.Second)
	restart := "restart both 10 s later"
	if pgDown {
		restart = "start Postgres, then both nodes, 10 s later"
	}
	s.step("restart", restart, func() {
		if pgDown {
			s.pg.start()
		}
		s.c.restart(l)
		s.c.restart(f)
	})
	s.converged(25 * time.Second)
	exp := expectation{frac: 1.0 / 3,
		why: "no quorum: the survivor paces its own 1/3 in fallback (local, or pooled through Postgres: still only its fraction)"}
	if pgDown {
		// With --postgres, Postgres is the witness (DESIGN 9): a member
		// that reaches neither a leader nor Postgres paces locally only
		// under the licence of its last heartbeat (--witness-ttl, 3 s),
		// since a leader may fence it and take its fraction back.
		exp = expectation{frac: 0,
			why: "no quorum and no witness: the survivor paces its 1/3 locally for at most --witness-ttl (3 s) after its last heartbeat to Postgres, then stops until either is back"}
	}
	s.expectCeiling(s.finish(exp))
}

// e. Kill 2 of 3 voters for 10 s (quorum lost), then restart them. With
// Postgres reachable when this build has --postgres.
func TestChaos_E_QuorumLost(t *testing.T) {
	o := chaosOpts{short: true}
	if agentHasFlag(t, "postgres") {
		o.postgres = true
	} else {
		t.Log("this build has no --postgres flag: quorum loss without Postgres")
	}
	quorumLoss(t, "e", o, false)
}

// f. As e, with Postgres unreachable as well.
func TestChaos_F_QuorumLostPostgresDown(t *testing.T) {
	needPostgresFlag(t)
	quorumLoss(t, "f", chaosOpts{postgres: true}, true)
}

// g. Stop the whole cluster, wipe every data dir, start it again with
// Postgres: the limit is restored from the checkpoint (nobody sets it
// again) and the load resumes without a burst.
func TestChaos_G_WipeAndRestoreFromPostgres(t *testing.T) {
	needPostgresFlag(t)
	s := newScenario(t, "g", chaosOpts{postgres: true})
	s.step("stop", "stop every agent (SIGTERM) and wipe every data dir", func() {
		s.c.stopAll()
		for _, a := range s.c.agents {
			if err := os.RemoveAll(a.dataDir); err != nil {
				t.Fatal(err)
			}
		}
	})
	s.step("start", "start them again on empty data dirs", func() {
		for _, a := range s.c.agents {
			s.c.restart(a)
		}
	})
	s.c.waitLeader(30 * time.Second)
	for _, a := range s.c.agents {
		out := waitCLI(t, a, 20*time.Second, "limit", "get", chaosKey)
		if !strings.Contains(out, "50") || !strings.Contains(out, "5") {
			t.Errorf("%s: limit get %s after the wipe: %q, want rate 50 burst 5", a.id, chaosKey, out)
		}
	}
	s.converged(25 * time.Second)
	s.expectCeiling(s.finish(expectation{frac: 0,
		why: "the whole cluster is down; once it is back (restored from Postgres) R, with no burst across the restart"}))
}

// h. Rolling restart of every node under load (SIGTERM, start again on the
// same data dir, wait until the cluster has converged, next), followers
// first.
func TestChaos_H_RollingRestart(t *testing.T) {
	s := newScenario(t, "h", chaosOpts{settle: -1})
	l := s.leader()
	order := append(s.followers(), l)
	var ids []string
	for _, a := range order {
		ids = append(ids, a.id)
	}
	s.step("rolling", "rolling restart of "+strings.Join(ids, ", "), func() {
		for _, a := range order {
			s.t.Logf("%s restarting %s", s.clock(time.Now()), a.id)
			a.stop()
			s.c.restart(a)
			s.converged(20 * time.Second)
			time.Sleep(2 * time.Second) // as an operator would, before the next
		}
	})
	s.step("done", "every node back", func() {})
	s.expectCeiling(s.finish(expectation{frac: 2.0 / 3, name: "2/3 R to R",
		why: "while a node is down its share is unheld and its callers are gone (2/3 R); once it is back and renewed, R"}))
}

// i. Five nodes (3 voters, 2 nonvoters); under load a sixth joins as a
// nonvoter and one of the nonvoters leaves.
func TestChaos_I_MembershipChange(t *testing.T) {
	s := newScenario(t, "i", chaosOpts{nodes: 5})
	s.expectRoles(map[string]string{"n1": "voter", "n2": "voter", "n3": "voter", "n4": "nonvoter", "n5": "nonvoter"})
	s.step("join", "n6 joins (nonvoter)", func() { s.startNode(6, 0) })
	s.waitMembers(6, 20*time.Second)
	s.converged(20 * time.Second)
	s.expectRoles(map[string]string{"n1": "voter", "n2": "voter", "n3": "voter", "n4": "nonvoter", "n5": "nonvoter", "n6": "nonvoter"})
	s.expectFractions(6, 20*time.Second)
	time.Sleep(3 * time.Second)
	n5 := s.node(5)
	s.step("leave", "n5 (nonvoter) leaves", func() {
		n5.mustCLI("leave")
		select {
		case <-n5.done:
		case <-time.After(20 * time.Second):
			t.Errorf("n5 still running 20 s after leaving")
		}
	})
	s.waitMembers(5, 20*time.Second)
	s.converged(20 * time.Second)
	s.expectRoles(map[string]string{"n1": "voter", "n2": "voter", "n3": "voter", "n4": "nonvoter", "n6": "nonvoter"})
	s.expectFractions(5, 20*time.Second)
	s.expectCeiling(s.finish(expectation{frac: 1,
		why: "every member is reachable: the leader holds every share (fractions shrink to 1/6 before n6's grows, and grow to 1/5 after n5 left)"}))
}

// expectRoles checks the leader's member list.
func (s *scenario) expectRoles(want map[string]string) {
	s.t.Helper()
	st, err := s.leader().status()
	if err != nil {
		s.t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range st.Members {
		got[m.ID] = m.Role
	}
	for id, role := range want {
		if got[id] != role {
			s.t.Errorf("member %s: role %q, want %q (members %+v)", id, got[id], role, st.Members)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok && got[id] != "none" {
			s.t.Errorf("unexpected member %s (%s)", id, got[id])
		}
	}
}

// expectFractions waits until every member's fallback fraction is 1/n.
func (s *scenario) expectFractions(n int, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, err := s.leader().status()
		ok := err == nil
		for _, m := range st.Members {
			if m.Role != "none" && (m.Fraction < 1/float64(n)-1e-9 || m.Fraction > 1/float64(n)+1e-9) {
				ok = false
			}
		}
		if ok {
			s.t.Logf("%s every fallback fraction is 1/%d", s.clock(time.Now()), n)
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("fractions not 1/%d within %v: %+v", n, d, st.Members)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// j (beyond the list; gated). A follower that crashes and is
// restarted within ShareTTL of its last renewal breaks the ceiling: the
// restarted process starts in fallback (mode local, promise 0: its previous
// incarnation's promise is forgotten) and paces its third locally at once,
// while the leader still counts that member's share until the old promise
// ends (q + ShareTTL) and has granted slots up to its horizon at the full
// rate. A 9 s share TTL (renewals every 3 s) makes the overlap long enough
// to show every time; with the 2 s default it is at most ~0.7 s and hides
// in the burst allowance. Fixed in node/fallback.go: a starting node does
// not fall back before ShareTTL has passed since it started. Kept as a
// regression test.
func TestChaos_J_FollowerRestartedWithinShareTTL(t *testing.T) {
	s := newScenario(t, "j", chaosOpts{load: chaosKey + ":40", extra: []string{"--share-ttl", "9s"}})
	f := s.followers()[0]
	s.step("crash", "SIGKILL follower "+f.id+" and restart it at once, twice, 4 s apart", func() {
		for range 2 {
			f.kill()
			s.c.restart(f)
			time.Sleep(4 * time.Second)
		}
	})
	s.step("done", "both restarts done", func() {})
	s.converged(20 * time.Second)
	s.expectCeiling(s.finish(expectation{frac: 1,
		why: "every member is back within seconds: the leader holds every share once it has renewed the restarted one"}))
}
