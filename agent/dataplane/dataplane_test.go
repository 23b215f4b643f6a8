package dataplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/dataplane"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// countingNode is a real node that counts forfeits.
type countingNode struct {
	*node.Node
	forfeits atomic.Int64
}

func (c *countingNode) Forfeit(r raftpace.Reservation) {
	c.forfeits.Add(1)
	c.Node.Forfeit(r)
}

// plane is a data plane over a real single-node cluster.
type plane struct {
	t   *testing.T
	n   *countingNode
	srv *httptest.Server
}

func newPlane(t *testing.T, opts ...dataplane.Option) *plane {
	t.Helper()
	c := nodetest.New(t, 1)
	cn := &countingNode{Node: c.Node(0)}
	srv := httptest.NewServer(dataplane.NewHandler(cn, opts...))
	t.Cleanup(srv.Close)
	return &plane{t: t, n: cn, srv: srv}
}

func (p *plane) limit(key string, rate float64, burst int) {
	p.t.Helper()
	if err := p.n.SetLimit(nodetest.Ctx(p.t, 10*time.Second), key, fsm.Limit{Rate: rate, Burst: burst}); err != nil {
		p.t.Fatal(err)
	}
}

// answer is a decoded answer.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) num(f string) float64 {
	v, _ := a.body[f].(float64)
	return v
}

func (p *plane) do(ctx context.Context, method, path, body string) answer {
	p.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, p.srv.URL+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.body); err != nil {
			p.t.Fatalf("%s %s: answer %d %q is no JSON object: %v", method, path, resp.StatusCode, b, err)
		}
	}
	if resp.StatusCode >= 300 && (a.body["code"] == nil || a.body["error"] == nil) {
		p.t.Fatalf("%s %s: error answer %d without code and error: %s", method, path, resp.StatusCode, b)
	}
	return a
}

// call does method path body and checks the status (and, for errors, the code).
func (p *plane) call(method, path, body string, status int, code string) answer {
	p.t.Helper()
	a := p.do(p.t.Context(), method, path, body)
	if a.status != status || (code != "" && a.body["code"] != code) {
		p.t.Fatalf("%s %s %s: %d %s, want %d %s", method, path, body, a.status, a.raw, status, code)
	}
	return a
}

// grant checks a grant's fields: 0 <= wait <= use_by, held >= 0.
func grant(t *testing.T, a answer) (wait, useBy, held float64) {
	t.Helper()
	wait, useBy, held = a.num("wait"), a.num("use_by"), a.num("held")
	if wait < 0 || useBy < wait || held < 0 || len(a.body) != 3 {
		t.Fatalf("grant %s: want 0 <= wait <= use_by and held >= 0", a.raw)
	}
	return wait, useBy, held
}

func TestReserve(t *testing.T) {
	p := newPlane(t)
	p.limit("k", 2, 2)
	wait, useBy, _ := grant(t, p.call("POST", "/v1/reserve/k", `{"n":2}`, 200, ""))
	if wait > 0.05 || useBy > 2 {
		t.Fatalf("first grant of a full bucket: wait %v use_by %v", wait, useBy)
	}
	// Refused reservations consume nothing: after five of them, the next
	// two events are one second away (2/s), not six.
	for range 5 {
		a := p.call("POST", "/v1/reserve/k", `{"n":2,"max_wait":0}`, 429, "limit_exceeded")
		if w := a.num("wait"); w < 0.8 || w > 1.1 || a.header.Get("Retry-After") != "1" {
			t.Fatalf("limit_exceeded: wait %v Retry-After %q", w, a.header.Get("Retry-After"))
		}
	}
	wait, _, _ = grant(t, p.call("POST", "/v1/reserve/k", `{"n":2,"max_wait":3}`, 200, ""))
	if wait < 0.7 || wait > 1.1 {
		t.Fatalf("after refusals: wait %v, want about 1s (refusals consumed nothing)", wait)
	}
	// An empty body takes the defaults: n 1, max_wait 0 (refused now).
	p.call("POST", "/v1/reserve/k", ``, 429, "limit_exceeded")
	// More events than the burst.
	a := p.call("POST", "/v1/reserve/k", `{"n":3,"max_wait":10}`, 400, "invalid")
	if a.body["field"] != "n" {
		t.Fatalf("n > burst: %s", a.raw)
	}
	p.call("POST", "/v1/reserve/nope", `{}`, 404, "unknown_key")
	// max_wait 0 sheds only on the rate: a key's first slot, free now, is
	// granted (one event and several).
	p.limit("fresh", 5, 2)
	grant(t, p.call("POST", "/v1/reserve/fresh", `{}`, 200, ""))
	p.limit("fresh2", 5, 2)
	grant(t, p.call("POST", "/v1/reserve/fresh2", `{"n":2}`, 200, ""))
	// A key holding '/', '?' and '%', escaped as one segment.
	odd := "a/b?c%dé"
	p.limit(odd, 100, 1)
	grant(t, p.call("POST", "/v1/reserve/"+url.PathEscape(odd), `{"max_wait":1}`, 200, ""))
	a = p.call("GET", "/v1/limits/"+url.PathEscape(odd), "", 200, "")
	if a.body["key"] != odd || a.num("rate") != 100 || a.num("burst") != 1 {
		t.Fatalf("limit: %s", a.raw)
	}
	p.call("GET", "/v1/limits/nope", "", 404, "unknown_key")
}

// POST /v1/reserve and /v1/wait without a key take several keys in the
// body: granted at one instant, or refused naming the key, consuming none.
func TestReserveAll(t *testing.T) {
	p := newPlane(t)
	p.limit("tenant:a", 10, 1)
	p.limit("global", 2, 1)
	both := `{"keys":[{"key":"tenant:a"},{"key":"global","n":1}],"max_wait":0}`
	grant(t, p.call("POST", "/v1/reserve", both, 200, ""))
	a := p.call("POST", "/v1/reserve", both, 429, "limit_exceeded")
	if a.body["key"] != "global" || a.num("wait") < 0.3 {
		t.Fatalf("second of both at once: %s; want global named, about 0.5s", a.raw)
	}
	// The refusal took nothing of tenant:a: its next slot is 0.1 s after
	// the grant, not after the refusal's would-be slot.
	wait, _, _ := grant(t, p.call("POST", "/v1/reserve/tenant:a", `{"max_wait":1}`, 200, ""))
	if wait > 0.15 {
		t.Fatalf("tenant:a after the refusal: wait %v, want at most 0.1s", wait)
	}
	// /v1/wait holds the request until the instant both allow.
	a = p.call("POST", "/v1/wait", `{"keys":[{"key":"tenant:a"},{"key":"global"}],"timeout":2}`, 200, "")
	if w, _, held := grant(t, a); w != 0 || held < 0.2 {
		t.Fatalf("wait for both: %s; want wait 0 after about 0.5s held", a.raw)
	}
	p.call("POST", "/v1/reserve", `{"keys":[{"key":"tenant:a"},{"key":"nope"}],"max_wait":1}`, 404, "unknown_key")
}

func TestInvalid(t *testing.T) {
	p := newPlane(t)
	p.limit("k", 10, 1)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/reserve/k", `{"bogus":1}`, "bogus"},
		{"POST", "/v1/reserve/k", `{"n":"x"}`, "n"},
		{"POST", "/v1/reserve/k", `{"n":0}`, "n"},
		{"POST", "/v1/reserve/k", `{"n":2000000}`, "n"},
		{"POST", "/v1/reserve/k", `{"max_wait":-1}`, "max_wait"},
		{"POST", "/v1/reserve/k", `{"max_wait":1e300}`, "max_wait"},
		{"POST", "/v1/reserve/k", `{"timeout":1}`, "timeout"},
		{"POST", "/v1/reserve/k", `{"n":1} {}`, "body"},
		{"POST", "/v1/reserve/k", `[1]`, "body"},
		{"POST", "/v1/reserve/k", `{"n":1`, "body"},
		{"POST", "/v1/reserve/k", `{"n":` + strings.Repeat(" ", 70<<10) + `1}`, "body"},
		{"POST", "/v1/reserve/", `{}`, "key"},
		{"POST", "/v1/reserve", `{}`, "keys"},
		{"POST", "/v1/reserve", `{"keys":[]}`, "keys"},
		{"POST", "/v1/reserve", `{"keys":[{"key":""}]}`, "keys"},
		{"POST", "/v1/reserve", `{"keys":[{"key":"k","n":0}]}`, "n"},
		{"POST", "/v1/reserve", `{"keys":[{"key":"k"}],"n":2}`, "n"},
		{"POST", "/v1/reserve", `{"keys":[{"key":"k","bogus":1}]}`, "bogus"},
		{"POST", "/v1/reserve", `{"keys":[{"key":"k"},{"key":"k"}]}`, "keys"},
		{"POST", "/v1/reserve/k", `{"keys":[{"key":"k"}]}`, "keys"},
		{"POST", "/v1/wait", `{"keys":[{"key":"k"}],"max_wait":1}`, "max_wait"},
		{"POST", "/v1/reserve/" + strings.Repeat("x", 300), `{}`, "key"},
		{"POST", "/v1/wait/k", `{"timeout":601}`, "timeout"},
		{"POST", "/v1/wait/k", `{"max_wait":1}`, "max_wait"},
		{"POST", "/v1/forfeit/k", `{"n":-1}`, "n"},
		{"POST", "/v1/pauses/k", `{}`, "seconds"},
		{"POST", "/v1/pauses/k", `{"seconds":0}`, "seconds"},
		{"POST", "/v1/pauses/k", `{"seconds":86401}`, "seconds"},
		{"POST", "/v1/pauses/k", `{"for":"forever"}`, "for"},
		{"POST", "/v1/pauses/k", `{"for":"1s","seconds":1}`, "seconds"},
		{"POST", "/v1/slots", `{}`, "keys"},
		{"POST", "/v1/slots", `{"keys":[""]}`, "keys"},
		{"POST", "/v1/slots", `{"keys":["k"],"ttl":0}`, "ttl"},
		{"POST", "/v1/slots", `{"keys":["k"],"ttl":3601}`, "ttl"},
		{"POST", "/v1/slots", `{"keys":["k"],"max_wait":-0.5}`, "max_wait"},
		{"GET", "/v1/limits/", ``, "key"},
	} {
		a := p.call(c.method, c.path, c.body, 400, "invalid")
		if a.body["field"] != c.field {
			t.Errorf("%s %s %.40s: field %v, want %s (%s)", c.method, c.path, c.body, a.body["field"], c.field, a.raw)
		}
	}
	a := p.call("GET", "/v1/reserve/k", "", 405, "method_not_allowed")
	if a.header.Get("Allow") != "POST" {
		t.Errorf("Allow %q", a.header.Get("Allow"))
	}
	p.call("PUT", "/v1/pauses/k", "", 405, "method_not_allowed")
	p.call("GET", "/v1/slots/x", "", 405, "method_not_allowed")
	p.call("PUT", "/v1/limits/k", `{"rate":1}`, 405, "method_not_allowed")
	p.call("GET", "/v1/status", "", 404, "not_found")
	// A node without a leader's slot cap: the node's own ttl bound (30s).
	if err := p.n.SetCap(t.Context(), "k", 1); err != nil {
		t.Fatal(err)
	}
	a = p.call("POST", "/v1/slots", `{"keys":["k"],"ttl":60}`, 400, "invalid")
	if a.body["field"] != "ttl" {
		t.Errorf("ttl past the node's most: %s", a.raw)
	}
}

func TestWait(t *testing.T) {
	p := newPlane(t)
	p.limit("w", 5, 1)
	grant(t, p.call("POST", "/v1/wait/w", ``, 200, ""))
	// The next event is 200 ms away: wait holds the request until then.
	begin := time.Now()
	wait, _, held := grant(t, p.call("POST", "/v1/wait/w", `{"timeout":5}`, 200, ""))
	if el := time.Since(begin); wait != 0 || el < 150*time.Millisecond || held < 0.1 {
		t.Fatalf("second wait: wait %v held %v after %v", wait, held, el)
	}
	// A wait longer than the timeout is refused at once, nothing consumed.
	p.limit("slow", 0.5, 1)
	grant(t, p.call("POST", "/v1/wait/slow", `{"timeout":1}`, 200, ""))
	begin = time.Now()
	a := p.call("POST", "/v1/wait/slow", `{"timeout":0.5}`, 429, "limit_exceeded")
	if el := time.Since(begin); el > 300*time.Millisecond || a.num("wait") < 1 || a.header.Get("Retry-After") != "2" {
		t.Fatalf("wait past its timeout: %s after %v, Retry-After %q", a.raw, el, a.header.Get("Retry-After"))
	}
	// A caller that hangs up before its slot forfeits it.
	before := p.n.forfeits.Load()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", p.srv.URL+"/v1/wait/slow", strings.NewReader(`{"timeout":5}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("wait answered %d before its slot", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.n.forfeits.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("a hang-up during /v1/wait did not forfeit the slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWaitOutlivesReadTimeout: a server's ReadTimeout must not end a wait.
func TestWaitOutlivesReadTimeout(t *testing.T) {
	c := nodetest.New(t, 1)
	n := c.Node(0)
	if err := n.SetLimit(t.Context(), "k", fsm.Limit{Rate: 2, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(dataplane.NewHandler(n))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Start()
	defer srv.Close()
	for i := range 3 { // the third waits about 500 ms, five read timeouts
		resp, err := http.Post(srv.URL+"/v1/wait/k", "application/json", strings.NewReader(`{"timeout":5}`))
		if err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("wait %d: %d", i, resp.StatusCode)
		}
	}
}

func TestPauses(t *testing.T) {
	p := newPlane(t)
	p.limit("k", 100, 1)
	a := p.call("GET", "/v1/pauses/k", "", 200, "")
	if a.num("remaining_s") != 0 || a.body["key"] != "k" {
		t.Fatalf("no pause: %s", a.raw)
	}
	a = p.call("POST", "/v1/pauses/k", `{"seconds":2}`, 200, "")
	if r := a.num("remaining_s"); r < 1.5 || r > 2 || a.num("remaining_ns") < 1.5e9 || a.body["remaining"] == "" {
		t.Fatalf("pause: %s", a.raw)
	}
	a = p.call("POST", "/v1/pauses/k", `{"for":"1s"}`, 200, "") // the longer pause stays
	if a.num("remaining_s") < 1.5 {
		t.Fatalf("a shorter pause replaced a longer one: %s", a.raw)
	}
	if a = p.call("GET", "/v1/pauses/k", "", 200, ""); a.num("remaining_s") < 1 {
		t.Fatalf("GET pause: %s", a.raw)
	}
	a = p.call("POST", "/v1/reserve/k", `{"max_wait":0.5}`, 429, "paused")
	if a.num("remaining") < 1 || a.header.Get("Retry-After") != "2" {
		t.Fatalf("paused: %s Retry-After %q", a.raw, a.header.Get("Retry-After"))
	}
	p.call("POST", "/v1/wait/k", `{"timeout":0.5}`, 429, "paused")
	// A wait longer than the pause waits it out.
	begin := time.Now()
	grant(t, p.call("POST", "/v1/wait/k", `{"timeout":5}`, 200, ""))
	if el := time.Since(begin); el < time.Second {
		t.Fatalf("wait through a pause took %v", el)
	}
	// Any valid key may be paused, as through the admin API (before its
	// limit is set, say).
	p.call("POST", "/v1/pauses/none", `{"seconds":1}`, 200, "")
	if a := p.call("GET", "/v1/pauses/other", ``, 200, ""); a.num("remaining_s") != 0 {
		t.Fatalf("GET of a key never paused: %s", a.raw)
	}
}

func TestSlotsAndForfeit(t *testing.T) {
	p := newPlane(t)
	if err := p.n.SetCap(t.Context(), "c", 1); err != nil {
		t.Fatal(err)
	}
	if err := p.n.SetCap(t.Context(), "d", 5); err != nil {
		t.Fatal(err)
	}
	a := p.call("POST", "/v1/slots", `{"keys":["d","c"],"ttl":5}`, 200, "")
	id, _ := a.body["id"].(string)
	if d := a.num("deadline"); !strings.HasPrefix(id, "s-") || d < 4 || d > 5 || a.num("held") < 0 {
		t.Fatalf("slot: %s", a.raw)
	}
	begin := time.Now()
	a = p.call("POST", "/v1/slots", `{"keys":["c","d"],"max_wait":0.3}`, 429, "concurrency_limit")
	full, _ := a.body["full"].([]any)
	if el := time.Since(begin); len(full) != 1 || full[0] != "c" || el < 250*time.Millisecond || a.header.Get("Retry-After") == "" {
		t.Fatalf("full cap: %s after %v", a.raw, el)
	}
	p.call("DELETE", "/v1/slots/"+id, "", 204, "")
	p.call("DELETE", "/v1/slots/"+id, "", 204, "") // already released
	a = p.call("POST", "/v1/slots", `{"keys":["c"]}`, 200, "")
	if d := a.num("deadline"); d < 29 || d > 30 {
		t.Fatalf("default ttl: %s", a.raw)
	}
	p.call("DELETE", "/v1/slots/s-nope", "", 404, "unknown_slot")
	p.call("POST", "/v1/slots", `{"keys":["nocap"]}`, 404, "unknown_key")

	before := p.n.forfeits.Load()
	a = p.call("POST", "/v1/forfeit/c", `{"n":2}`, 200, "")
	if a.body["key"] != "c" || a.num("n") != 2 || p.n.forfeits.Load() != before+1 {
		t.Fatalf("forfeit: %s, %d forfeits", a.raw, p.n.forfeits.Load()-before)
	}
	p.call("POST", "/v1/forfeit/c", ``, 200, "")
}

func TestOverloaded(t *testing.T) {
	p := newPlane(t, dataplane.WithMaxInFlight(1))
	p.limit("k", 1, 1)
	grant(t, p.call("POST", "/v1/reserve/k", `{"max_wait":1}`, 200, ""))
	done := make(chan answer, 1)
	go func() { done <- p.do(context.Background(), "POST", "/v1/wait/k", `{"timeout":5}`) }()
	time.Sleep(200 * time.Millisecond) // the wait holds the one place
	a := p.call("POST", "/v1/reserve/k", ``, 503, "overloaded")
	if a.header.Get("Retry-After") != "1" {
		t.Fatalf("overloaded: Retry-After %q", a.header.Get("Retry-After"))
	}
	if a := <-done; a.status != 200 {
		t.Fatalf("the wait in flight: %s", a.raw)
	}
	p.call("POST", "/v1/reserve/k", `{"max_wait":2}`, 200, "") // room again
}

func TestClosed(t *testing.T) {
	p := newPlane(t)
	p.limit("k", 10, 1)
	if err := p.n.Close(); err != nil {
		t.Fatal(err)
	}
	a := p.call("POST", "/v1/reserve/k", `{"max_wait":1}`, 503, "closed")
	if a.header.Get("Retry-After") != "" {
		t.Fatalf("closed: Retry-After %q (retry elsewhere, not here)", a.header.Get("Retry-After"))
	}
}

// TestAnyInput: random routes, methods and bodies never panic, never
// answer 500, and every answer is JSON (or 204).
func TestAnyInput(t *testing.T) {
	p := newPlane(t)
	p.limit("k", 1000, 10)
	if err := p.n.SetCap(t.Context(), "k", 3); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/v1/reserve/k", "/v1/wait/k", "/v1/forfeit/k", "/v1/pauses/k", "/v1/slots", "/v1/slots/s-x",
		"/v1/limits/k", "/v1/reserve/%00", "/v1/wait/..", "/v1/slots/", "/v1/", "/", "/v1/reserve/k/extra"}
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}
	parts := []string{`{`, `}`, `"n"`, `"max_wait"`, `"timeout"`, `"seconds"`, `"for"`, `"keys"`, `"ttl"`, `:`, `,`,
		`1`, `-1`, `0.001`, `1e308`, `-1e308`, `null`, `true`, `"1s"`, `["k"]`, `[]`, `"\u0000"`, `9223372036854775807`, ` `}
	rng := uint64(1)
	next := func(n int) int { rng = rng*6364136223846793005 + 1442695040888963407; return int(rng>>33) % n }
	for i := range 600 {
		var body strings.Builder
		for range next(8) {
			body.WriteString(parts[next(len(parts))])
		}
		if next(3) == 0 { // often a well-formed object
			body.Reset()
			fmt.Fprintf(&body, `{%s:%s}`, parts[2+next(7)], parts[11+next(12)])
		}
		method, path := methods[next(len(methods))], paths[next(len(paths))]
		a := p.do(t.Context(), method, path, body.String())
		if a.status == 500 || (a.status != 204 && a.body == nil) {
			t.Fatalf("request %d: %s %s %s: %d %s", i, method, path, body.String(), a.status, a.raw)
		}
	}
}

// A spent quota answers 429 quota_exhausted naming the key and its reset,
// and GET /v1/remaining/KEY reads what is left.
func TestQuota(t *testing.T) {
	p := newPlane(t)
	if err := p.n.SetLimit(nodetest.Ctx(t, 10*time.Second), "q", fsm.Limit{Rate: 100, Burst: 3, Quota: 3, Per: fsm.PerDay}); err != nil {
		t.Fatal(err)
	}
	p.limit("g", 100, 3)
	a := p.call("GET", "/v1/remaining/q", "", 200, "")
	_, reset := fsm.PerDay.Window(time.Now())
	if a.body["quota"] != "3/day" || a.num("left") != 3 || a.num("used") != 0 || a.body["reset"] != reset.Format(time.RFC3339) || a.num("tokens") != 3 {
		t.Fatalf("remaining before: %s", a.raw)
	}
	grant(t, p.call("POST", "/v1/reserve/q", `{"n":3}`, 200, ""))
	a = p.call("POST", "/v1/reserve", `{"keys":[{"key":"g"},{"key":"q"}],"max_wait":600}`, 429, "quota_exhausted")
	if a.body["key"] != "q" || a.body["reset"] != reset.Format(time.RFC3339) || a.header.Get("Retry-After") == "" {
		t.Fatalf("past the quota: %s", a.raw)
	}
	p.call("POST", "/v1/wait/q", `{"timeout":1}`, 429, "quota_exhausted")
	a = p.call("GET", "/v1/remaining/q", "", 200, "")
	if a.num("left") != 0 || a.num("used") != 3 {
		t.Fatalf("remaining after: %s", a.raw)
	}
	if a = p.call("GET", "/v1/remaining/g", "", 200, ""); a.body["quota"] != nil || a.num("tokens") != 3 {
		t.Fatalf("remaining of a key without a quota: %s; want its tokens, no quota (the refusal took none of g)", a.raw)
	}
	p.call("GET", "/v1/remaining/nope", "", 404, "unknown_key")
	p.call("POST", "/v1/remaining/q", "", 405, "method_not_allowed")
}
