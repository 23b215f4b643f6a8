package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
)

// The quota of the e2e runs: a day's budget the rate (30/s, 20/s for the
// two survivors) spends in about 5 s, so a run of 3 s before the leader's
// kill and 12 s after it ends on the quota, not on the rate.
const (
	quotaRate  = 30
	quotaBurst = 3
	quotaCount = 150
)

// quotaRun starts three agents loading one key with a quota of 150 a day
// (UTC), SIGKILLs the leader after 3 s and runs the survivors 12 s more.
// fresh starts the agents with --unsafe-fresh-start (a new leader forgets
// the committed count): the twin. It returns the cluster, the events per
// day window, when the leader was killed and the load stopped, and what a
// survivor's `raftpace limit remaining q --json` said before the stop.
func quotaRun(t *testing.T, fresh bool) (c *cluster, days map[int64]int, killed, stopped time.Time, remaining string) {
	var extra []string
	if fresh {
		extra = append(extra, "--unsafe-fresh-start")
	}
	c = startCluster(t, 3, agentOpts{loads: []string{"q:4"}, extra: extra})
	c.agents[0].mustCLI("limit", "set", "q", "--rate", "30", "--burst", "3", "--quota", "150/day")
	time.Sleep(3 * time.Second)
	leader := c.agent(c.waitLeader(10 * time.Second))
	killed = time.Now()
	leader.kill()
	t.Logf("SIGKILL to the leader %s", leader.id)
	time.Sleep(12 * time.Second)
	stopped = time.Now()
	for _, a := range c.agents {
		if a != leader {
			remaining = a.mustCLI("limit", "remaining", "q", "--json")
			break
		}
	}
	c.stopAll()
	return c, perDay(c.events(), "q"), killed, stopped, remaining
}

// perDay counts key's events in each UTC day, by its start (Unix seconds).
func perDay(evs []timeline.Event, key string) map[int64]int {
	out := map[int64]int{}
	for _, e := range evs {
		if e.Key == key {
			start, _ := fsm.PerDay.Window(time.Unix(0, e.At))
			out[start.Unix()]++
		}
	}
	return out
}

// A quota holds across the leader's SIGKILL, with real processes: the new
// leader starts at the count the old one committed, so the day never
// passes its 150 events; the quota (not the rate) ends the run; and a
// survivor's `raftpace limit remaining` reads at least what was admitted
// as used.
func TestE2E_QuotaAcrossLeaderKill(t *testing.T) {
	t.Parallel()
	c, days, killed, stopped, out := quotaRun(t, false)
	total, before, last := 0, 0, int64(0)
	for _, e := range c.events() {
		if e.Key == "q" {
			if e.At < killed.UnixNano() {
				before++
			}
			last = max(last, e.At)
		}
	}
	for day, n := range days {
		t.Logf("the day from %s: %d events of a quota of %d (%d before the kill)", time.Unix(day, 0).UTC().Format(time.DateOnly), n, quotaCount, before)
		if n > quotaCount {
			t.Errorf("the day from %s admitted %d events: quota %d", time.Unix(day, 0).UTC().Format(time.DateOnly), n, quotaCount)
		}
		total += n
	}
	if len(days) == 1 { // a run across midnight (UTC) splits its events: the floors below are for one day
		// A leader change loses at most the committed batch the old
		// leader had not granted (about a second of the rate and its
		// burst): most of the quota is spent, and spent early.
		if total < quotaCount-2*(quotaRate+quotaBurst) || before < 20 {
			t.Errorf("%d events (%d before the kill): the quota was not what ended the run", total, before)
		}
		if quiet := stopped.Sub(time.Unix(0, last)); quiet < 2*time.Second {
			t.Errorf("the last event came %v before the load stopped: the rate, not the quota, ended the run", quiet)
		}
	}
	var r struct {
		Quota      string
		Used, Left int64
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("limit remaining --json: %v:\n%s", err, out)
	}
	if r.Quota != "150/day" || r.Used < int64(total) || r.Left != quotaCount-r.Used {
		t.Errorf("limit remaining on a survivor: %+v; want at least the %d admitted events used", r, total)
	}
}

// The twin: agents whose new leader forgets the committed count
// (--unsafe-fresh-start) pass the day's quota after the kill, so the check
// above can fail.
func TestE2E_QuotaWithoutCommittedCountBreaks(t *testing.T) {
	t.Parallel()
	_, days, _, _, _ := quotaRun(t, true)
	for day, n := range days {
		if n > quotaCount {
			t.Logf("the day from %s: %d events against a quota of %d: caught", time.Unix(day, 0).UTC().Format(time.DateOnly), n, quotaCount)
			return
		}
	}
	t.Fatalf("a new leader forgetting the count kept every day within the quota (%v): the check cannot fail", days)
}
