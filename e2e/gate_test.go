package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// Real-process tests of the refusal gate (fleet-wide pauses after a 429 or
// 503), the fleet-wide concurrency caps, and the start-up policy file.

// ---- helpers ----------------------------------------------------------------

// startClusterEach is startCluster with flags of each agent's own: each(i, a)
// returns the extra flags of agent i (0-based), added after o.extra. Only
// o.extra of the options is used.
func startClusterEach(t *testing.T, size int, o agentOpts, each func(i int, a *agent) []string) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	for i := 0; i < size; i++ {
		a := c.newAgent(fmt.Sprintf("n%d", i+1), nil)
		a.args = []string{"--bootstrap-expect", fmt.Sprint(size), "--log-format", "json", "--log-level", "debug"}
		a.args = append(a.args, o.extra...)
		if each != nil {
			a.args = append(a.args, each(i, a)...)
		}
		var join []string
		if i > 0 {
			join = []string{c.agents[0].addrs.GossipAddr}
		}
		a.start(join)
	}
	t.Cleanup(c.stopAll)
	c.waitLeader(30 * time.Second)
	return c
}

// gateStatusDoc is the part of `raftpace status --json` about pauses, caps
// and limits.
type gateStatusDoc struct {
	ID     string            `json:"id"`
	Leader string            `json:"leader"`
	Mode   string            `json:"mode"`
	Stats  map[string]uint64 `json:"stats"`
	Limits []struct {
		Key   string  `json:"key"`
		Rate  float64 `json:"rate"`
		Burst int     `json:"burst"`
	} `json:"limits"`
	Pauses []struct {
		Key       string        `json:"key"`
		Remaining time.Duration `json:"remaining_ns"`
	} `json:"pauses"`
	Caps []capDoc `json:"caps"`
}

type capDoc struct {
	Key   string `json:"key"`
	Max   int    `json:"max"`
	InUse int    `json:"in_use"`
}

func (a *agent) gateStatus() (gateStatusDoc, error) {
	out, code := a.cli("status", "--json")
	if code != 0 {
		return gateStatusDoc{}, fmt.Errorf("%s: status exit %d: %s", a.id, code, out)
	}
	var st gateStatusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return gateStatusDoc{}, fmt.Errorf("%s: status json: %v: %s", a.id, err, out)
	}
	return st, nil
}

// slotsCLI runs `raftpace slots SUB ARGS... --addr A` against agent a.
// (agent.cli puts --addr right after "slots", before the subcommand, which
// the slots command does not accept, unlike limit.)
func (a *agent) slotsCLI(args ...string) (string, int) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.command(ctx, append(append([]string{"slots"}, args...), "--addr", a.addrs.HTTPAddr)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("raftpace slots %v: %v", args, err)
	}
	return string(out), code
}

func (a *agent) mustSlotsCLI(args ...string) string {
	a.t.Helper()
	out, code := a.slotsCLI(args...)
	if code != 0 {
		a.t.Fatalf("raftpace slots %v: exit %d:\n%s", args, code, out)
	}
	return out
}

// pause returns key's remaining pause in the status, if it has one.
func (st gateStatusDoc) pause(key string) (time.Duration, bool) {
	for _, p := range st.Pauses {
		if p.Key == key {
			return p.Remaining, true
		}
	}
	return 0, false
}

// eventually polls f every 20ms until it is true, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// arrival is one request a refuser received.
type arrival struct {
	at   time.Time
	path string // which agent sent it: each loads its own path
}

// refuser is an HTTP server in the test process that records the arrival
// of every request and, once armed, answers the next request with 429 and
// Retry-After: hint (omitted if hint is ""); every other request gets 200.
type refuser struct {
	srv  *httptest.Server
	key  string // req.URL.Host of its URLs: the key client.Transport paces by
	hint string

	mu        sync.Mutex
	arrivals  []arrival
	armed     bool
	refusedAt time.Time
	refused   chan struct{} // closed on the refusal
}

func newRefuser(t *testing.T, hint string) *refuser {
	r := &refuser{hint: hint, refused: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	u, err := url.Parse(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.key = u.Host
	return r
}

func (r *refuser) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	r.mu.Lock()
	r.arrivals = append(r.arrivals, arrival{at: now, path: req.URL.Path})
	refuse := r.armed
	if refuse {
		r.armed = false
		r.refusedAt = now
	}
	r.mu.Unlock()
	if refuse {
		if r.hint != "" {
			w.Header().Set("Retry-After", r.hint)
		}
		w.WriteHeader(http.StatusTooManyRequests)
		close(r.refused)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// url returns the server's URL for the agent with the given id: the same
// key (host:port) for every agent, a path of its own.
func (r *refuser) url(id string) string { return r.srv.URL + "/" + id }

// arm makes the next request the refused one.
func (r *refuser) arm() {
	r.mu.Lock()
	r.armed = true
	r.mu.Unlock()
}

// waitRefusal returns the arrival time of the refused request.
func (r *refuser) waitRefusal(t *testing.T, d time.Duration) time.Time {
	t.Helper()
	select {
	case <-r.refused:
	case <-time.After(d):
		t.Fatalf("%s: no request arrived within %v of arming the refusal", r.key, d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refusedAt
}

func (r *refuser) all() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.arrivals)
}

// between returns the arrivals in the open interval (from, to).
func (r *refuser) between(from, to time.Time) []arrival {
	var out []arrival
	for _, a := range r.all() {
		if a.at.After(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// firstAfter returns the first arrival at or after from.
func (r *refuser) firstAfter(from time.Time) (arrival, bool) {
	for _, a := range r.all() {
		if !a.at.Before(from) {
			return a, true
		}
	}
	return arrival{}, false
}

// events returns the arrivals as a timeline of key "srv" (node = path).
func (r *refuser) events() []timeline.Event {
	var evs []timeline.Event
	for _, a := range r.all() {
		evs = append(evs, timeline.Event{At: a.at.UnixNano(), Node: strings.Trim(a.path, "/"), Key: "srv"})
	}
	return evs
}

// offsets formats arrival times relative to t0.
func offsets(as []arrival, t0 time.Time) string {
	var b strings.Builder
	for i, a := range as {
		if i == 20 {
			fmt.Fprintf(&b, " ... (%d in all)", len(as))
			break
		}
		fmt.Fprintf(&b, " %s@+%v", strings.Trim(a.path, "/"), a.at.Sub(t0).Round(time.Millisecond))
	}
	return b.String()
}

// ---- refusal gate -----------------------------------------------------------

// A 429 with Retry-After: 15 seen by one worker pauses the key for the whole
// fleet: no request of the key reaches the server for 15 s, from the process
// that saw it, from a process that arrives a second later, from anyone;
// then requests resume. An unrelated key keeps flowing meanwhile, a node
// without load shows the pause, and the server never sees more than the
// ceiling of rate 20, burst 1.
func TestGate_RefusalPausesTheFleet(t *testing.T) {
	paused := newRefuser(t, "15")
	other := newRefuser(t, "")
	c := startClusterEach(t, 3, agentOpts{}, func(i int, a *agent) []string {
		if i == 0 {
			return []string{"--load-http", paused.url(a.id), "--load-http", other.url(a.id)}
		}
		return nil
	})
	a2, a3 := c.agents[1], c.agents[2]
	// Agent 2 comes back with load a second after the refusal; until then
	// it is down (the cluster keeps its quorum with agents 1 and 3).
	a2.stop()
	c.waitLeader(20 * time.Second)
	a3.mustCLI("limit", "set", paused.key, "--rate", "20", "--burst", "1")
	a3.mustCLI("limit", "set", other.key, "--rate", "20", "--burst", "1")
	eventually(t, 15*time.Second, "agent 1's requests reach both servers", func() bool {
		return len(paused.all()) >= 10 && len(other.all()) >= 10
	})
	time.Sleep(time.Second)

	paused.arm()
	t0 := paused.waitRefusal(t, 5*time.Second)

	// Agent 3 runs no load: its status shows the pause shortly after t0.
	var shown time.Duration
	var shownAfter time.Duration
	for time.Since(t0) < 3*time.Second {
		st, err := a3.gateStatus()
		if err == nil {
			if p, ok := st.pause(paused.key); ok {
				shown, shownAfter = p, time.Since(t0)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A second process with load on the paused key arrives 1 s after t0.
	time.Sleep(time.Until(t0.Add(time.Second)))
	a2.args = append(a2.args, "--load-http", paused.url(a2.id))
	c.restart(a2)
	a2Up := time.Since(t0)
	// How agent 2 is admitting while it catches up (for the failure
	// message, should it send during the pause).
	time.Sleep(time.Until(t0.Add(2 * time.Second)))
	if st, err := a2.gateStatus(); err == nil {
		t.Logf("agent 2 at t0+%v: mode %s, leader %q, pauses %+v, stats granted=%d forwarded=%d leases=%d fallback=%d",
			time.Since(t0).Round(time.Millisecond), st.Mode, st.Leader, st.Pauses, st.Stats["granted"], st.Stats["forwarded"], st.Stats["leases"], st.Stats["fallback"])
	}

	// Agent 2 measures the pause from its own apply of it, later than
	// agent 1: give it until t0+25s to send once its pause is over.
	time.Sleep(time.Until(t0.Add(18 * time.Second)))
	sentBy := func(id string, from time.Time) []arrival {
		var out []arrival
		for _, a := range paused.between(from, t0.Add(time.Hour)) {
			if strings.Trim(a.path, "/") == id {
				out = append(out, a)
			}
		}
		return out
	}
	for len(sentBy(a2.id, t0.Add(14500*time.Millisecond))) == 0 && time.Since(t0) < 25*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	lastA2 := time.Since(t0)
	c.stopAll()
	fromA2, a2After := sentBy(a2.id, t0), sentBy(a2.id, t0.Add(14500*time.Millisecond))

	t.Logf("refused one request at t0; agent 2 restarted with load, ready at t0+%v", a2Up.Round(time.Millisecond))
	if shown == 0 {
		t.Errorf("agent 3's status never showed a pause of %s within 3s of the refusal", paused.key)
	} else {
		t.Logf("agent 3's status showed the pause at t0+%v with %v remaining", shownAfter.Round(time.Millisecond), shown.Round(time.Millisecond))
		if shown <= 10*time.Second || shown > 15*time.Second {
			t.Errorf("agent 3's status: %v remaining at t0+%v, want in (10s, 15s]", shown, shownAfter)
		}
	}

	// Requests already on the wire at t0 may land just after it; nothing
	// else may arrive until the pause ends, from either process: not one
	// whose Wait was granted before the pause and was still sleeping until
	// its slot, nor one from a process that has not yet applied the pause.
	bad := paused.between(t0.Add(50*time.Millisecond), t0.Add(14500*time.Millisecond))
	byAgent := map[string][]arrival{}
	for _, a := range bad {
		id := strings.Trim(a.path, "/")
		byAgent[id] = append(byAgent[id], a)
	}
	for _, id := range slices.Sorted(maps.Keys(byAgent)) {
		as := byAgent[id]
		t.Errorf("%s sent %d requests during the 15s pause (t0+50ms..t0+14.5s), from t0+%v to t0+%v:%s",
			id, len(as), as[0].at.Sub(t0).Round(time.Millisecond), as[len(as)-1].at.Sub(t0).Round(time.Millisecond), offsets(as, t0))
	}
	if early := paused.between(t0, t0.Add(50*time.Millisecond)); len(early) > 0 {
		t.Logf("in flight at t0 (within 50ms):%s", offsets(early, t0))
	}
	resume, ok := paused.firstAfter(t0.Add(14500 * time.Millisecond))
	switch {
	case !ok:
		t.Errorf("requests never resumed after the pause (last at t0+%v)", lastOffset(paused.all(), t0))
	case resume.at.Before(t0.Add(15*time.Second - 100*time.Millisecond)):
		t.Errorf("requests resumed at t0+%v, before the 15s pause ended", resume.at.Sub(t0))
	case !resume.at.Before(t0.Add(17 * time.Second)):
		t.Errorf("requests resumed only at t0+%v, want before t0+17s", resume.at.Sub(t0))
	default:
		t.Logf("requests resumed at t0+%v (%s)", resume.at.Sub(t0).Round(time.Millisecond), strings.Trim(resume.path, "/"))
	}
	// Agent 2's load did run (else the above proves nothing about it).
	if len(fromA2) == 0 {
		t.Errorf("agent 2 sent no request by t0+%v: its load never ran", lastA2.Round(time.Millisecond))
	} else {
		t.Logf("agent 2 sent %d requests, the first at t0+%v, %d after t0+14.5s (the first of those at t0+%v)", len(fromA2),
			fromA2[0].at.Sub(t0).Round(time.Millisecond), len(a2After), firstOffset(a2After, t0))
	}

	// The unrelated key was not paused.
	n := len(other.between(t0.Add(time.Second), t0.Add(14*time.Second)))
	t.Logf("unrelated key: %d requests in (t0+1s, t0+14s)", n)
	if n == 0 {
		t.Errorf("the unrelated key %s got no request during the pause of %s", other.key, paused.key)
	}

	rep := timeline.Check(paused.events(), "srv", timeline.Spec{
		Limit:   timeline.Limit{Rate: 20, Burst: 1},
		Windows: windows(),
		Delta:   useGrace,
	})
	t.Log(rep.String())
	if !rep.OK() {
		t.Errorf("arrivals at the server exceed rate 20 burst 1:\n%s", rep.String())
	}
}

func firstOffset(as []arrival, t0 time.Time) time.Duration {
	if len(as) == 0 {
		return 0
	}
	return as[0].at.Sub(t0).Round(time.Millisecond)
}

func lastOffset(as []arrival, t0 time.Time) time.Duration {
	if len(as) == 0 {
		return 0
	}
	return as[len(as)-1].at.Sub(t0)
}

// A 429 whose Retry-After cannot be parsed still pauses the fleet: for the
// first refusal, 1 s of backoff. It is never permission to retry at once,
// and the fleet does not stay away for long either.
func TestGate_MalformedHintUsesBoundedFallback(t *testing.T) {
	srv := newRefuser(t, "soon")
	c := startClusterEach(t, 3, agentOpts{}, func(i int, a *agent) []string {
		if i == 0 {
			return []string{"--load-http", srv.url(a.id)}
		}
		return nil
	})
	c.agents[2].mustCLI("limit", "set", srv.key, "--rate", "20", "--burst", "1")
	eventually(t, 15*time.Second, "agent 1's requests reach the server", func() bool { return len(srv.all()) >= 10 })
	time.Sleep(500 * time.Millisecond)
	srv.arm()
	t0 := srv.waitRefusal(t, 5*time.Second)
	time.Sleep(time.Until(t0.Add(4 * time.Second)))
	c.stopAll()

	if bad := srv.between(t0.Add(50*time.Millisecond), t0.Add(900*time.Millisecond)); len(bad) > 0 {
		t.Errorf("%d requests arrived within 900ms of a refusal with a malformed hint:%s", len(bad), offsets(bad, t0))
	}
	resume, ok := srv.firstAfter(t0.Add(900 * time.Millisecond))
	switch {
	case !ok:
		t.Errorf("requests never resumed after the refusal")
	case resume.at.Before(t0.Add(time.Second - 100*time.Millisecond)):
		t.Errorf("requests resumed at t0+%v, before the 1s backoff ended", resume.at.Sub(t0))
	case !resume.at.Before(t0.Add(3 * time.Second)):
		t.Errorf("requests resumed only at t0+%v, want within 3s (1s backoff)", resume.at.Sub(t0))
	default:
		t.Logf("malformed hint: requests resumed at t0+%v", resume.at.Sub(t0).Round(time.Millisecond))
	}
}

// Of two hints recorded at once from two processes, 30 s and 5 s, the later
// deadline stays, whichever commits first: every node then shows more than
// 25 s left.
func TestGate_ConcurrentHintsKeepTheLaterDeadline(t *testing.T) {
	c := startCluster(t, 3, agentOpts{})
	for round := range 4 {
		key := fmt.Sprintf("api-%d", round)
		var wg sync.WaitGroup
		var outs [2]string
		var codes [2]int
		hints := [2]string{"30s", "5s"}
		from := [2]*agent{c.agents[0], c.agents[1]}
		if round%2 == 1 {
			from = [2]*agent{c.agents[1], c.agents[2]}
		}
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Alternate which one starts first.
				if (i == 0) == (round < 2) {
					time.Sleep(5 * time.Millisecond)
				}
				outs[i], codes[i] = from[i].cli("pause", key, "--for", hints[i])
			}()
		}
		wg.Wait()
		for i := range 2 {
			if codes[i] != 0 {
				t.Fatalf("round %d: %s: pause %s --for %s: exit %d:\n%s", round, from[i].id, key, hints[i], codes[i], outs[i])
			}
		}
		t.Logf("round %d: %s said %q, %s said %q", round, from[0].id, strings.TrimSpace(outs[0]), from[1].id, strings.TrimSpace(outs[1]))
		// Each node shows what it has applied: a follower that was not
		// part of the commit may apply the later pause a moment after the
		// commands returned. A 5 s deadline overriding the 30 s one would
		// stay; a late apply does not.
		for _, a := range c.agents {
			var st gateStatusDoc
			var p time.Duration
			var ok bool
			for end := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var err error
				if st, err = a.gateStatus(); err != nil {
					t.Fatal(err)
				}
				if p, ok = st.pause(key); (ok && p > 25*time.Second) || time.Now().After(end) {
					break
				}
			}
			if !ok || p <= 25*time.Second {
				t.Errorf("round %d: %s shows %s paused for %v (present %v) 3 s after both pauses returned, want > 25s: %+v", round, a.id, key, p, ok, st.Pauses)
			}
		}
	}
}

// ---- concurrency caps -------------------------------------------------------

// slotInterval is one slot a --slot-log recorded: held in [from, to).
type slotInterval struct {
	node, id string
	keys     []string
	from, to int64 // unix ns
	deadline int64
	released bool // an R line was seen; else to is the deadline
}

// parseSlotLogs reads --slot-log files: "A unix_nanos node slot_id keys
// deadline" and "R unix_nanos node slot_id".
func parseSlotLogs(t *testing.T, paths ...string) []slotInterval {
	t.Helper()
	var out []slotInterval
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		open := map[string]int{} // node/slot id -> index in out
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			fs := strings.Fields(sc.Text())
			bad := func() { t.Fatalf("%s:%d: malformed slot log line %q", p, line, sc.Text()) }
			if len(fs) == 0 {
				continue
			}
			num := func(s string) int64 {
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					bad()
				}
				return v
			}
			switch fs[0] {
			case "A":
				if len(fs) != 6 {
					bad()
				}
				id := fs[2] + "/" + fs[3]
				if _, dup := open[id]; dup {
					t.Fatalf("%s:%d: slot %s acquired twice", p, line, id)
				}
				dl := num(fs[5])
				open[id] = len(out)
				out = append(out, slotInterval{node: fs[2], id: fs[3], keys: strings.Split(fs[4], ","), from: num(fs[1]), to: dl, deadline: dl})
			case "R":
				if len(fs) != 4 {
					bad()
				}
				i, ok := open[fs[2]+"/"+fs[3]]
				if !ok || out[i].released {
					t.Fatalf("%s:%d: release of a slot not held: %q", p, line, sc.Text())
				}
				out[i].to, out[i].released = num(fs[1]), true
			default:
				bad()
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return out
}

// maxConcurrent is a sweep line over the intervals holding key: the most
// held at one instant, and when. Intervals are half-open, so one that ends
// exactly when another starts does not overlap it.
func maxConcurrent(ivs []slotInterval, key string) (most int, at int64) {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, iv := range ivs {
		if slices.Contains(iv.keys, key) && iv.to > iv.from {
			edges = append(edges, edge{iv.from, +1}, edge{iv.to, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if cur > most {
			most, at = cur, e.at
		}
	}
	return most, at
}

// The sweep line can fail: on overlapping intervals it reports more than a
// cap of 5, and it does not count intervals that merely touch.
func TestGate_SweepLineCountsOverlaps(t *testing.T) {
	var ivs []slotInterval
	for i := range 6 {
		ivs = append(ivs, slotInterval{keys: []string{"llm", "tenant-a"}, from: int64(100 + i), to: int64(200 + i)})
	}
	if got, at := maxConcurrent(ivs, "llm"); got != 6 || at != 105 {
		t.Errorf("six overlapping intervals: max %d at %d, want 6 at 105", got, at)
	}
	if got, _ := maxConcurrent(ivs, "llm"); got <= 5 {
		t.Errorf("the checker would pass a cap of 5 broken by 6 holders")
	}
	if got, _ := maxConcurrent(ivs, "other"); got != 0 {
		t.Errorf("key held by nobody: max %d", got)
	}
	touching := []slotInterval{
		{keys: []string{"k"}, from: 0, to: 10},
		{keys: []string{"k"}, from: 10, to: 20},
		{keys: []string{"k"}, from: 20, to: 30},
	}
	if got, _ := maxConcurrent(touching, "k"); got != 1 {
		t.Errorf("touching intervals: max %d, want 1", got)
	}
}

// Three processes take slots of two fleet-wide caps (llm: 5, tenant-a: 2),
// some one key, some both at once: at no instant do more than 5 hold llm or
// more than 2 hold tenant-a, and the caps are reached.
func TestGate_SlotsCapAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	groups := []string{"llm,tenant-a", "llm", "llm,tenant-a"}
	var logs []string
	c := startClusterEach(t, 3, agentOpts{}, func(i int, a *agent) []string {
		p := filepath.Join(dir, a.id+".slots")
		logs = append(logs, p)
		return []string{"--load-slots", groups[i], "--slot-workers", "3",
			"--slot-hold-min", "5ms", "--slot-hold-max", "60ms", "--slot-log", p}
	})
	c.agents[0].mustSlotsCLI("set", "llm", "--max", "5")
	c.agents[1].mustSlotsCLI("set", "tenant-a", "--max", "2")
	start := time.Now()
	time.Sleep(4 * time.Second)
	var caps []capDoc
	if out, code := c.agents[2].slotsCLI("list", "--json"); code == 0 {
		if err := json.Unmarshal([]byte(out), &caps); err != nil {
			t.Errorf("slots list --json: %v: %s", err, out)
		}
	}
	t.Logf("slots list --json mid-run: %+v", caps)
	for _, cp := range caps {
		if want := map[string]int{"llm": 5, "tenant-a": 2}[cp.Key]; cp.Max != want || cp.InUse > want {
			t.Errorf("slots list: %+v, want max %d and at most that in use", cp, want)
		}
	}
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	c.stopAll()

	ivs := parseSlotLogs(t, logs...)
	perNode := map[string]int{}
	unreleased := 0
	for _, iv := range ivs {
		perNode[iv.node]++
		if !iv.released {
			unreleased++
		}
	}
	llm, llmAt := maxConcurrent(ivs, "llm")
	ten, tenAt := maxConcurrent(ivs, "tenant-a")
	t.Logf("%d slots (%v per node, %d without a release line): at most %d held llm (at %v), %d held tenant-a (at %v)",
		len(ivs), perNode, unreleased, llm, time.Unix(0, llmAt).Format("15:04:05.000"), ten, time.Unix(0, tenAt).Format("15:04:05.000"))
	if llm > 5 {
		t.Errorf("%d slots of llm held at once, cap 5", llm)
	}
	if ten > 2 {
		t.Errorf("%d slots of tenant-a held at once, cap 2", ten)
	}
	if llm < 4 {
		t.Errorf("at most %d slots of llm held at once: the cap of 5 was never approached", llm)
	}
	if ten < 2 {
		t.Errorf("at most %d slots of tenant-a held at once: the cap of 2 was never reached", ten)
	}
	if len(ivs) <= 100 {
		t.Errorf("only %d slots taken in ~8s", len(ivs))
	}
	if len(perNode) != 3 {
		t.Errorf("slots from %d processes, want 3: %v", len(perNode), perNode)
	}
}

// A process killed while holding the only slot of a cap leaks it for its TTL
// and no longer: another process waiting for the cap gets the slot once the
// dead holder's deadline has passed, never before.
func TestGate_KilledHolderSlotFreedAfterTTL(t *testing.T) {
	dir := t.TempDir()
	f1, f2 := filepath.Join(dir, "holder.slots"), filepath.Join(dir, "waiter.slots")
	c := startClusterEach(t, 3, agentOpts{}, func(i int, a *agent) []string {
		if i == 0 {
			return []string{"--load-slots", "one", "--slot-workers", "1",
				"--slot-hold-min", "1h", "--slot-hold-max", "1h", "--slot-ttl", "4s", "--slot-log", f1}
		}
		return nil
	})
	holder := c.agents[0]
	leader := c.waitLeader(10 * time.Second)
	c.agents[1].mustSlotsCLI("set", "one", "--max", "1")
	eventually(t, 15*time.Second, "agent 1 logs its acquire", func() bool {
		b, _ := os.ReadFile(f1)
		return strings.HasPrefix(string(b), "A ") && strings.Contains(string(b), "\n")
	})
	holder.kill()
	tk := time.Now()

	// The waiter is a new process (a fourth member, joining agents 2 and 3):
	// agents 2 and 3 stay up throughout, so the cluster keeps its quorum
	// with the holder dead.
	waiter := c.newAgent("n4", []string{"--bootstrap-expect", "3", "--log-format", "json", "--log-level", "debug",
		"--load-slots", "one", "--slot-workers", "1", "--slot-hold-min", "10ms", "--slot-hold-max", "10ms",
		"--slot-ttl", "4s", "--slot-log", f2})
	waiter.start([]string{c.agents[1].addrs.GossipAddr, c.agents[2].addrs.GossipAddr})
	waiterUp := time.Now()

	held := parseSlotLogs(t, f1)
	if len(held) != 1 || held[0].released {
		t.Fatalf("holder's log: %+v, want one acquire and no release", held)
	}
	deadline := time.Unix(0, held[0].deadline)
	t.Logf("holder %s (leader %s) acquired at %v, killed %v later; deadline %v after the acquire; waiter ready %v after the kill",
		holder.id, leader, time.Unix(0, held[0].from).Format("15:04:05.000"), tk.Sub(time.Unix(0, held[0].from)).Round(time.Millisecond),
		deadline.Sub(time.Unix(0, held[0].from)).Round(time.Millisecond), waiterUp.Sub(tk).Round(time.Millisecond))
	if !tk.Before(deadline.Add(-time.Second)) {
		t.Fatalf("killed only %v before the slot's deadline: too late to tell a reclaim from a release", deadline.Sub(tk))
	}

	eventually(t, time.Until(deadline.Add(6*time.Second)), "the waiter logs an acquire", func() bool {
		b, _ := os.ReadFile(f2)
		return strings.Contains(string(b), "\n")
	})
	time.Sleep(500 * time.Millisecond)
	c.stopAll()

	got := parseSlotLogs(t, f2)
	first := time.Unix(0, got[0].from)
	t.Logf("waiter's first acquire %v after the dead holder's deadline (%d acquires in all)", first.Sub(deadline).Round(time.Millisecond), len(got))
	if first.Before(deadline.Add(-100 * time.Millisecond)) {
		t.Errorf("the waiter got the slot %v before the dead holder's deadline: granted twice", deadline.Sub(first))
	}
	if first.After(deadline.Add(3 * time.Second)) {
		t.Errorf("the waiter got the slot only %v after the dead holder's deadline, want within 3s", first.Sub(deadline))
	}
	if most, _ := maxConcurrent(append(held, got...), "one"); most > 1 {
		t.Errorf("%d slots of one held at once, cap 1", most)
	}
}

// ---- policy file ------------------------------------------------------------

// limitDoc is GET /v1/limits/KEY.
type limitDoc struct {
	Key   string  `json:"key"`
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// adminLimit reads key's limit from agent a's admin API, with no CLI start-up.
func adminLimit(hc *http.Client, a *agent, key string) (limitDoc, error) {
	resp, err := hc.Get("http://" + a.addrs.HTTPAddr + "/v1/limits/" + url.PathEscape(key))
	if err != nil {
		return limitDoc{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return limitDoc{}, fmt.Errorf("GET /v1/limits/%s: %s", key, resp.Status)
	}
	var l limitDoc
	err = json.NewDecoder(resp.Body).Decode(&l)
	return l, err
}

// Limits and caps in a policy file are registered by every agent at
// start-up; an operator's change at run time reaches every node within a
// second; and an agent restarted with the same file keeps running, logs the
// conflict and does not undo the change.
func TestGate_PolicyAndRuntimeChange(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policy, []byte(`{"limits":{"p":{"rate":50,"burst":5}},"caps":{"c":3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, agentOpts{extra: []string{"--policy", policy}})
	for _, a := range c.agents {
		eventually(t, 15*time.Second, a.id+" shows the policy's limit and cap", func() bool {
			out, code := a.cli("limit", "get", "p", "--json")
			var l limitDoc
			if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Rate != 50 || l.Burst != 5 {
				return false
			}
			out, code = a.slotsCLI("list", "--json")
			var caps []capDoc
			return code == 0 && json.Unmarshal([]byte(out), &caps) == nil && slices.ContainsFunc(caps, func(c capDoc) bool { return c.Key == "c" && c.Max == 3 })
		})
	}

	// Watch agents 2 and 3 through their admin API while agent 1's CLI
	// changes the limit.
	hc := &http.Client{Timeout: 2 * time.Second}
	type seen struct {
		at  time.Time
		err error
	}
	var wg sync.WaitGroup
	results := make([]seen, 3)
	begin := time.Now()
	for i := 1; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(begin) < 10*time.Second {
				l, err := adminLimit(hc, c.agents[i], "p")
				if err == nil && l.Rate == 7 && l.Burst == 2 {
					results[i] = seen{at: time.Now()}
					return
				}
				results[i].err = err
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	set := time.Now()
	c.agents[0].mustCLI("limit", "set", "p", "--rate", "7", "--burst", "2")
	setDone := time.Now()
	wg.Wait()
	for i := 1; i < 3; i++ {
		r := results[i]
		if r.at.IsZero() {
			t.Errorf("%s never showed rate 7 burst 2 (last error %v)", c.agents[i].id, r.err)
			continue
		}
		t.Logf("%s shows the new limit %v after the set command started (%v after it returned; the command took %v)",
			c.agents[i].id, r.at.Sub(set).Round(time.Millisecond), r.at.Sub(setDone).Round(time.Millisecond), setDone.Sub(set).Round(time.Millisecond))
		if r.at.Sub(set) >= time.Second {
			t.Errorf("%s showed the new limit only %v after `limit set` started, want within 1s", c.agents[i].id, r.at.Sub(set))
		}
	}

	// Agent 2 restarts with the same policy file: it logs the conflict,
	// keeps running, and the runtime value stays. First a restart at once,
	// then one after 2s down (a supervisor's restart delay, a redeploy):
	// the cluster moved on meanwhile and the restarted node must catch up
	// before it compares its file with the cluster.
	a2 := c.agents[1]
	const conflict, registered = "policy file disagrees with the cluster", "policy registered"
	logged := func() (int, int) {
		s := readFile(t, a2.logPath)
		return strings.Count(s, conflict), strings.Count(s, registered)
	}
	for _, down := range []time.Duration{0, 2 * time.Second} {
		c.agents[0].mustCLI("limit", "set", "p", "--rate", "7", "--burst", "2") // again, should a round have undone it
		conflicts0, registered0 := logged()
		a2.stop()
		time.Sleep(down)
		c.restart(a2)
		eventually(t, 15*time.Second, "agent 2 registers its policy file after its restart", func() bool {
			c, r := logged()
			return c > conflicts0 || r > registered0
		})
		time.Sleep(time.Second)
		if !a2.running() {
			t.Fatalf("restart after %v down: agent 2 exited after the policy conflict (%v); log:\n%s", down, a2.exitErr, a2.tail())
		}
		if c, _ := logged(); c == conflicts0 {
			t.Errorf("restart after %v down: agent 2's policy file (rate 50 burst 5) disagrees with the cluster (7/2), and it logged no conflict", down)
		}
		for _, a := range c.agents {
			l, err := adminLimit(hc, a, "p")
			if err != nil || l.Rate != 7 || l.Burst != 2 {
				t.Errorf("restart after %v down: %s shows limit p %+v (%v), want rate 7 burst 2: the restarted agent's policy file undid the runtime change", down, a.id, l, err)
			}
		}
		out := a2.mustSlotsCLI("list", "--json")
		var caps []capDoc
		if err := json.Unmarshal([]byte(out), &caps); err != nil || !slices.ContainsFunc(caps, func(c capDoc) bool { return c.Key == "c" && c.Max == 3 }) {
			t.Errorf("restart after %v down: agent 2's caps %s, want c max 3", down, out)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
