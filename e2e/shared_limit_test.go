package e2e

// The two tests every worker language has (python_test.go, ruby_test.go):
// its workers calling client.wait through their agents' unix sockets share
// one limit, and the same workers pacing alone break it.

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

const (
	shareRate  = 30
	shareBurst = 3
	shareRun   = 10 * time.Second // agent mode
	soloRun    = 5 * time.Second  // solo mode
)

// startWorkers starts perAgent workers of language l per agent socket (or,
// with "" sockets, that many in solo mode), and once all are ready, lets
// them start together. It returns them and the moment they start.
func startWorkers(t *testing.T, l lang, dir, key, mode string, sockets []string, perAgent int, d time.Duration) ([]*worker, time.Time) {
	var ws []*worker
	for i, sock := range sockets {
		for j := 0; j < perAgent; j++ {
			ws = append(ws, startWorker(t, l, dir, workerOpts{
				name: fmt.Sprintf("%s%d-%d", l.prefix, i+1, j+1), socket: sock, key: key, mode: mode,
				rate: shareRate, burst: shareBurst, later: true, duration: d,
			}))
		}
	}
	return ws, startTogether(t, ws)
}

func timelines(ws []*worker) []string {
	var files []string
	for _, w := range ws {
		files = append(files, w.timeline)
	}
	return files
}

// testWorkersShareOneLimit: perAgent workers of language l beside each of
// three agents, each calling client.wait through its agent's unix socket,
// share one limit of 30/s burst 3: `raftpace check` on their merged
// timelines finds no window of 0.5, 1, 2 or 5 s over R*W + B + R*delta,
// and together they admit at least 90% of R over the run.
func testWorkersShareOneLimit(t *testing.T, l lang, perAgent int) {
	l = needLang(t, l)
	c := startCluster(t, 3, agentOpts{perAgent: withSocket(t)})
	key := l.prefix + "-shared"
	c.agents[0].mustCLI("limit", "set", key, "--rate", fmt.Sprint(shareRate), "--burst", fmt.Sprint(shareBurst))
	var sockets []string
	for _, a := range c.agents {
		sockets = append(sockets, socketOf(a))
	}
	ws, startAt := startWorkers(t, l, c.dir, key, "agent", sockets, perAgent, shareRun)
	for _, w := range ws {
		w.wait(shareRun + 30*time.Second)
	}

	doc, code := runCheck(t, key, shareRate, shareBurst, timelines(ws))
	t.Log(doc.summary())
	if code != 0 || !doc.OK {
		t.Errorf("raftpace check: exit %d, ceiling exceeded:\n%s", code, doc.summary())
	}
	k := doc.Keys[0]
	if len(k.PerNode) != len(ws) {
		t.Errorf("events from %d workers, want %d: %v", len(k.PerNode), len(ws), k.PerNode)
	}
	// Utilisation over the run [startAt, startAt+shareRun): the workers'
	// events, on the same wall clock the agents use.
	var evs []timeline.Event
	for _, w := range ws {
		evs = append(evs, w.events()...)
	}
	s := keySeries(evs, key)
	util := s.rate(startAt, startAt.Add(shareRun)) / shareRate
	t.Logf("%s: utilisation over the run: %.1f%% of %d/s (check's first-to-last: %.1f%%)", l.name, 100*util, shareRate, 100*k.Utilisation)
	if util < 0.9 {
		t.Errorf("the %s workers admitted %.1f%% of %d/s over the run; want at least 90%%", l.name, 100*util, shareRate)
	}
}

// testWorkersPacingAloneBreakTheLimit, the non-vacuity twin: n workers of
// language l each pacing alone at R with a local GCRA (no agent) admit
// about n x R, and the same check must fail, every window over its bound.
func testWorkersPacingAloneBreakTheLimit(t *testing.T, l lang, n int) {
	l = needLang(t, l)
	dir := keptDir(t)
	key := l.prefix + "-shared"
	ws, _ := startWorkers(t, l, dir, key, "solo", make([]string, n), 1, soloRun)
	for _, w := range ws {
		w.wait(soloRun + 35*time.Second)
	}
	doc, code := runCheck(t, key, shareRate, shareBurst, timelines(ws))
	t.Log(doc.summary())
	if code != 1 || doc.OK {
		t.Fatalf("raftpace check: exit %d, ok=%v on %d %s workers pacing alone: the check cannot fail\n%s",
			code, doc.OK, n, l.name, doc.summary())
	}
	k := doc.Keys[0]
	worst := 0.0
	for _, w := range k.Windows {
		if !w.Over {
			t.Errorf("W=%s not over its bound at ~%dR: max %d bound %.2f", w.Window, n, w.MaxCount, w.Bound)
		}
		worst = max(worst, float64(w.MaxCount)/w.Bound)
	}
	t.Logf("%s, %d pacing alone: %.1f/s = %.2f x R; worst window %.2f x its bound",
		l.name, n, k.AchievedRate, k.AchievedRate/shareRate, worst)
	if k.AchievedRate < 0.75*float64(n)*shareRate {
		t.Errorf("%d %s workers pacing alone admitted %.1f/s, expected about %d x %d/s", n, l.name, k.AchievedRate, n, shareRate)
	}
}
