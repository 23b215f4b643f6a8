package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// Six Python worker processes, two beside each of three agents, each
// calling client.wait through its agent's unix socket, share one limit of
// 30/s burst 3: `raftpace check` on their merged timelines finds no window
// of 0.5, 1, 2 or 5 s over R*W + B + R*delta, and together they admit at
// least 90% of R over the run.
func TestE2E_PythonWorkersShareOneLimit(t *testing.T) {
	t.Parallel()
	testWorkersShareOneLimit(t, python, 2)
}

// The non-vacuity twin: the same six workers each pacing alone at R with a
// local GCRA (no agent) admit about 6 x R, and the same check must fail.
func TestE2E_PythonWorkersPacingAloneBreakTheLimit(t *testing.T) {
	t.Parallel()
	testWorkersPacingAloneBreakTheLimit(t, python, 6)
}

// A Python worker that is SIGSTOPped right after it received a grant with
// a non-zero wait, and continued long after the grant's use-by (1 s, 20 x
// the agent's --use-grace), must not use that slot: it forfeits it (the
// agent's forfeited counter goes up) and asks again, so its timeline holds
// no event that came from that grant after its use-by, and the merged
// ceiling of all workers holds.
//
// The assertion can fail: a client that ignores the rule (pyworker.py
// --mode naive: reserve, sleep to go_at, go, never checking Grant.late)
// goes at once when continued, ~1 s after the use-by, on the stale
// grant. The test stops such a worker in the same way and asserts that
// staleUses reports that event.
func TestE2E_PythonWorkerSIGSTOPDoesNotUseStaleSlot(t *testing.T) {
	t.Parallel()
	py := needLang(t, python)
	c := startCluster(t, 3, agentOpts{perAgent: withSocket(t)})
	const key = "py-stale"
	const rate, burst = 4, 1 // three busy workers keep a backlog of ~0.75 s: grants wait
	c.agents[0].mustCLI("limit", "set", key, "--rate", fmt.Sprint(rate), "--burst", fmt.Sprint(burst))
	var busy []*worker
	for i, a := range c.agents {
		busy = append(busy, startWorker(t, py, c.dir, workerOpts{name: fmt.Sprintf("busy%d", i+1),
			socket: socketOf(a), key: key, mode: "agent", later: true, duration: 30 * time.Second}))
	}
	startAt := startTogether(t, busy)
	time.Sleep(time.Until(startAt.Add(time.Second))) // the backlog builds up

	honest := stopOnGrant(t, py, c.dir, c.agents[0], key, "agent")
	naive := stopOnGrant(t, py, c.dir, c.agents[1], key, "naive")
	for _, w := range busy {
		w.terminate()
	}

	// The honest worker: it forfeited the stale grant and went on a fresh one.
	if bad := staleUses(honest.grants, honest.events, useGrace); len(bad) > 0 {
		t.Errorf("the Python client used a stale grant:\n  %s", strings.Join(bad, "\n  "))
	}
	if len(honest.events) != 1 || len(honest.grants) < 2 {
		t.Errorf("honest worker: %d events after %d grants; want 1 event on a fresh grant after the stale one",
			len(honest.events), len(honest.grants))
	}
	if honest.forfeits < 1 {
		t.Errorf("%s's forfeited counter did not go up (%+d) when the worker dropped the stale grant", c.agents[0].id, honest.forfeits)
	}
	// The naive worker: the same check catches its stale use.
	bad := staleUses(naive.grants, naive.events, useGrace)
	t.Logf("naive worker (ignores use_by), as the check reports it: %d stale use(s), forfeits %+d\n  %s",
		len(bad), naive.forfeits, strings.Join(bad, "\n  "))
	if len(bad) == 0 {
		t.Errorf("staleUses did not catch a worker that went on a grant 1 s past its use-by: the assertion above is vacuous")
	}

	// The ceiling of everything the honest workers did.
	evs := honest.events
	for _, w := range busy {
		evs = append(evs, w.events()...)
	}
	rep := check(evs, key, rate, burst, 0, 0)
	t.Log(rep.String())
	if !rep.OK() {
		t.Errorf("ceiling exceeded:\n%s", rep.String())
	}
}

// stopRun is what stopOnGrant saw of one stopped worker.
type stopRun struct {
	grants   []grant
	events   []timeline.Event
	forfeits int // change of its agent's forfeited counter over the run
}

// stopOnGrant runs a worker beside agent a that holds its first grant with
// a wait of at least 200ms (pyworker.py --hold-wait): the test SIGSTOPs it
// there, before the grant's time, keeps it stopped until 1 s (20 x the
// use-grace) past the grant's use-by, and at least 1.5 s, SIGCONTs it and
// lets it run until its next event.
func stopOnGrant(t *testing.T, py lang, dir string, a *agent, key, mode string) stopRun {
	t.Helper()
	before := forfeited(t, a)
	w := startWorker(t, py, dir, workerOpts{name: "victim-" + mode, socket: socketOf(a), key: key, mode: mode,
		duration: 30 * time.Second, holdWait: 200 * time.Millisecond})
	hold := w.waitLine("HOLD", 20*time.Second)
	w.cmd.Process.Signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); processState(w.cmd.Process.Pid) != "T"; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not stopped 5s after SIGSTOP (state %q)", w.name, processState(w.cmd.Process.Pid))
		}
		time.Sleep(time.Millisecond)
	}
	stoppedAt := time.Now()
	fmt.Fprintln(w.stdin) // read when it is continued
	var held grant
	for _, g := range w.grants() {
		if g.held {
			held = g
		}
	}
	// Stopped for at least 30 x the use-grace, and until the grant is
	// stale by 20 x the use-grace.
	stop := max(30*useGrace, time.Until(time.Unix(0, held.useBy).Add(20*useGrace)))
	time.Sleep(stop)
	continuedAt := time.Now()
	w.cmd.Process.Signal(syscall.SIGCONT)
	w.wait(20 * time.Second)
	t.Logf("%s: %s; SIGSTOPped %v before go_at for %v, continued %v after use-by", w.name, hold,
		time.Duration(held.goAt-stoppedAt.UnixNano()).Round(time.Millisecond), stop.Round(time.Millisecond),
		time.Duration(continuedAt.UnixNano()-held.useBy).Round(time.Millisecond))
	if stoppedAt.UnixNano() > held.goAt {
		t.Logf("%s: note: the stop landed after go_at (the worker was blocked in the hold until then anyway)", w.name)
	}
	r := stopRun{grants: w.grants(), events: w.events(), forfeits: forfeited(t, a) - before}
	for _, e := range r.events {
		t.Logf("%s: went %v after it was continued, after %d grant(s); %s forfeited %+d",
			w.name, time.Duration(e.At-continuedAt.UnixNano()).Round(time.Millisecond), len(r.grants), a.id, r.forfeits)
	}
	return r
}

// forfeited is agent a's forfeited counter (stats of /v1/status).
func forfeited(t *testing.T, a *agent) int {
	t.Helper()
	st, err := a.status()
	if err != nil {
		t.Fatal(err)
	}
	return st.Stats["forfeited"]
}
