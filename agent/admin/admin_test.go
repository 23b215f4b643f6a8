package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/report"
)

// fakeNode is an in-memory admin.Node. err, when set, is returned by every
// method.
type fakeNode struct {
	mu       sync.Mutex
	limits   map[string]fsm.Limit
	joined   [][]string
	left     chan struct{}
	err      error
	lastCtx  context.Context
	leaveErr error
	caps     map[string]int
}

func newFake() *fakeNode {
	return &fakeNode{limits: map[string]fsm.Limit{}, left: make(chan struct{}, 1)}
}

func (f *fakeNode) record(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCtx = ctx
	return f.err
}

func (f *fakeNode) Status(ctx context.Context) (report.Status, error) {
	if err := f.record(ctx); err != nil {
		return report.Status{}, err
	}
	return report.Status{
		ID: "n1", State: "Leader", Leader: "n1", Term: 3, Granting: true,
		Members: []report.MemberStatus{{ID: "n1", Addr: "127.0.0.1:7400", Role: "voter", Health: "alive", Leader: true}},
		Limits:  []report.LimitStatus{{Key: "a", Rate: 5, Burst: 1}},
	}, nil
}

func (f *fakeNode) SetLimit(ctx context.Context, key string, lim fsm.Limit) error {
	if err := f.record(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits[key] = lim
	return nil
}

func (f *fakeNode) Limit(ctx context.Context, key string) (fsm.Limit, error) {
	if err := f.record(ctx); err != nil {
		return fsm.Limit{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lim, ok := f.limits[key]
	if !ok {
		return fsm.Limit{}, fmt.Errorf("node: limit %q: %w", key, raftpace.ErrUnknownKey)
	}
	return lim, nil
}

func (f *fakeNode) Limits(ctx context.Context) (map[string]fsm.Limit, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.limits), nil
}

func (f *fakeNode) Join(ctx context.Context, addrs []string) (int, error) {
	if err := f.record(ctx); err != nil {
		return 0, err
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return 0, fmt.Errorf("node: join: %w: address %q: must be host:port", raftpace.ErrInvalidRequest, a)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joined = append(f.joined, addrs)
	return len(addrs), nil
}

func (f *fakeNode) Leave(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		panic("leave without a deadline")
	}
	f.mu.Lock()
	err := f.leaveErr
	f.mu.Unlock()
	f.left <- struct{}{}
	return err
}

func newServer(t *testing.T, f *fakeNode) (*httptest.Server, *admin.Client) {
	t.Helper()
	srv := httptest.NewServer(admin.NewHandler(f))
	t.Cleanup(srv.Close)
	return srv, &admin.Client{Addr: strings.TrimPrefix(srv.URL, "http://"), HTTP: srv.Client()}
}

// call sends a raw request and returns status and body.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if !json.Valid(b) {
		t.Errorf("%s %s: body is not JSON: %q", method, path, b)
	}
	return resp.StatusCode, string(b)
}

func TestHandler_Routes(t *testing.T) {
	f := newFake()
	f.limits["a"] = fsm.Limit{Rate: 5, Burst: 1}
	srv, _ := newServer(t, f)

	tests := []struct {
		method, path, body string
		code               int
		want               string // substring of the body
	}{
		{"GET", "/v1/status", "", 200, `"leader":"n1"`},
		{"GET", "/v1/status", "", 200, `"members":[{"id":"n1"`},
		{"GET", "/v1/limits", "", 200, `{"limits":{"a":{"rate":5,"burst":1}}}`},
		{"GET", "/v1/limits/a", "", 200, `{"key":"a","rate":5,"burst":1}`},
		{"PUT", "/v1/limits/b", `{"rate":2.5,"burst":3}`, 200, `{"key":"b","rate":2.5,"burst":3}`},
		{"PUT", "/v1/limits/c", `{"rate":7}`, 200, `{"key":"c","rate":7,"burst":1}`},
		{"PUT", "/v1/limits/c", "  {\"rate\":7}\n\n", 200, `"burst":1`},
		{"POST", "/v1/join", `{"addrs":["127.0.0.1:7401","h:1"]}`, 200, `{"contacted":2}`},

		// 400: validation, JSON.
		{"PUT", "/v1/limits/d", `{"rate":0}`, 400, `Rate 0: must be > 0`},
		{"PUT", "/v1/limits/d", `{"rate":-1,"burst":0}`, 400, `Rate -1: must be > 0; fsm: invalid limit: Burst 0: must be >= 1`},
		{"PUT", "/v1/limits/d", `{"rate":5,"burst":0}`, 400, `Burst 0: must be >= 1`},
		{"PUT", "/v1/limits/d", `{"rate":1e300}`, 400, `must be <= 1e+09`},
		{"PUT", "/v1/limits/d", `{"burst":2}`, 400, `field \"rate\" is required`},
		{"PUT", "/v1/limits/d", `{"rate":null}`, 400, `field \"rate\" is required`},
		{"PUT", "/v1/limits/d", `{"rate":1,"burst":1.5}`, 400, `invalid JSON body`},
		{"PUT", "/v1/limits/d", `{"rate":1,"burst":1e30}`, 400, `invalid JSON body`},
		{"PUT", "/v1/limits/d", `{"rate":"5"}`, 400, `invalid JSON body`},
		{"PUT", "/v1/limits/d", `{"rate":5`, 400, `invalid JSON body: unexpected EOF`},
		{"PUT", "/v1/limits/d", `{"rate":5,"brust":2}`, 400, `unknown field \"brust\"`},
		{"PUT", "/v1/limits/d", `{"rate":5}{"rate":6}`, 400, `unexpected data after the JSON object`},
		{"PUT", "/v1/limits/d", `{"rate":5} x`, 400, `unexpected data after the JSON object`},
		{"PUT", "/v1/limits/d", ``, 400, `request body is empty`},
		{"PUT", "/v1/limits/d", `[1]`, 400, `invalid JSON body`},
		{"POST", "/v1/join", `{"addrs":[]}`, 400, `field \"addrs\" is required`},
		{"POST", "/v1/join", `{}`, 400, `field \"addrs\" is required`},
		{"POST", "/v1/join", `{"addrs":["nope"]}`, 400, `must be host:port`},
		{"POST", "/v1/join", `{"addrs":"h:1"}`, 400, `invalid JSON body`},
		{"GET", "/v1/limits/a%20b", "", 400, `fsm: invalid key \"a b\": contains whitespace U+0020`},
		{"PUT", "/v1/limits/a%09b", `{"rate":1}`, 400, `contains whitespace U+0009`},
		{"GET", "/v1/limits/", "", 400, `must not be empty`},
		{"GET", "/v1/limits/" + strings.Repeat("k", 257), "", 400, `257 bytes, longer than the maximum 256`},

		// 404.
		{"GET", "/v1/limits/nope", "", 404, `node: limit \"nope\": unknown key`},
		{"GET", "/v1/nothing", "", 404, `no such endpoint: GET /v1/nothing`},
		{"GET", "/", "", 404, `no such endpoint`},

		// 405.
		{"POST", "/v1/status", "", 405, `method POST not allowed for /v1/status (allowed: GET)`},
		{"DELETE", "/v1/limits/a", "", 405, `allowed: GET, PUT`},
		{"GET", "/v1/join", "", 405, `allowed: POST`},
		{"GET", "/v1/leave", "", 405, `allowed: POST`},
		{"PUT", "/v1/limits", `{"rate":1}`, 405, `allowed: GET`},
	}
	for _, tc := range tests {
		code, body := call(t, srv, tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: got %d %s; want %d containing %s", tc.method, tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
	if got := f.limits["b"]; got != (fsm.Limit{Rate: 2.5, Burst: 3}) {
		t.Errorf("limit b = %+v", got)
	}
	if _, ok := f.limits["d"]; ok {
		t.Errorf("an invalid limit reached the node: %+v", f.limits["d"])
	}
	if len(f.joined) != 1 || f.joined[0][1] != "h:1" {
		t.Errorf("joined = %v", f.joined)
	}
}

func TestHandler_Allow(t *testing.T) {
	srv, _ := newServer(t, newFake())
	resp, err := srv.Client().Post(srv.URL+"/v1/limits/a", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Allow"); resp.StatusCode != 405 || got != "GET, PUT" {
		t.Errorf("status %d, Allow %q", resp.StatusCode, got)
	}
}

func TestHandler_ErrorStatuses(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{fmt.Errorf("node: set limit: %w: bad", raftpace.ErrInvalidRequest), 400},
		{fmt.Errorf("node: %w", raftpace.ErrUnknownKey), 404},
		{fmt.Errorf("node: set limit \"k\": %w: %w", raftpace.ErrNoLeader, context.DeadlineExceeded), 503},
		{raftpace.ErrClosed, 503},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), 503},
		{errors.New("disk on fire"), 500},
	}
	for _, tc := range tests {
		f := newFake()
		f.err = tc.err
		srv, _ := newServer(t, f)
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/status", ""},
			{"GET", "/v1/limits", ""},
			{"GET", "/v1/limits/k", ""},
			{"PUT", "/v1/limits/k", `{"rate":1}`},
			{"POST", "/v1/join", `{"addrs":["h:1"]}`},
		} {
			code, body := call(t, srv, r.method, r.path, r.body)
			var e admin.ErrorResponse
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
				t.Errorf("%s %s: body %q is not an error object", r.method, r.path, body)
			}
			if code != tc.code || !strings.Contains(e.Error, tc.err.Error()) {
				t.Errorf("%v: %s %s: got %d %q; want %d with the node's message", tc.err, r.method, r.path, code, e.Error, tc.code)
			}
		}
	}
}

func TestHandler_RequestTimeout(t *testing.T) {
	f := newFake()
	srv, _ := newServer(t, f)
	if code, _ := call(t, srv, "GET", "/v1/status", ""); code != 200 {
		t.Fatalf("status %d", code)
	}
	f.mu.Lock()
	ctx := f.lastCtx
	f.mu.Unlock()
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > admin.RequestTimeout {
		t.Errorf("node got a context without the request timeout (deadline %v, ok %v)", dl, ok)
	}
}

func TestHandler_OversizedBody(t *testing.T) {
	srv, _ := newServer(t, newFake())
	pad := strings.Repeat(" ", admin.MaxBodyBytes)
	for _, tc := range []struct{ method, path, body string }{
		// The object fits; the whitespace after it does not.
		{"PUT", "/v1/limits/k", `{"rate":1,"burst":1}` + pad},
		{"POST", "/v1/join", `{"addrs":["h:1"]}` + pad},
		// The object itself is too large.
		{"PUT", "/v1/limits/k", `{"rate":1` + pad + `}`},
		{"POST", "/v1/join", `{"addrs":["` + strings.Repeat("a", admin.MaxBodyBytes) + `:1"]}`},
	} {
		code, resp := call(t, srv, tc.method, tc.path, tc.body)
		if code != 400 || !strings.Contains(resp, "request body larger than 65536 bytes") {
			t.Errorf("%s %s with %d bytes: %d %s", tc.method, tc.path, len(tc.body), code, resp)
		}
	}
}

func TestHandler_EscapedKeys(t *testing.T) {
	f := newFake()
	srv, c := newServer(t, f)
	ctx := context.Background()
	keys := []string{
		"provider:acme/cred:42", "a?b#c", "100%", "..", ".", "ключ", "a+b", "x%2Fy", "trailing/",
		strings.Repeat("k", fsm.MaxKeyLen),
	}
	for i, key := range keys {
		lim := fsm.Limit{Rate: float64(i + 1), Burst: i + 1}
		if err := c.SetLimit(ctx, key, lim); err != nil {
			t.Fatalf("SetLimit(%q): %v", key, err)
		}
		if got := f.limits[key]; got != lim {
			t.Errorf("node got %q = %+v, want %+v", key, got, lim)
		}
		got, err := c.Limit(ctx, key)
		if err != nil || got != lim {
			t.Errorf("Limit(%q) = %+v, %v", key, got, err)
		}
	}
	all, err := c.Limits(ctx)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("Limits = %v, %v", all, err)
	}
	// The raw escaped form reaches the node unescaped.
	if code, body := call(t, srv, "GET", "/v1/limits/provider:acme%2Fcred:42", ""); code != 200 ||
		!strings.Contains(body, `"key":"provider:acme/cred:42"`) {
		t.Errorf("escaped slash: %d %s", code, body)
	}
}

func TestClient(t *testing.T) {
	f := newFake()
	_, c := newServer(t, f)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil || st.Leader != "n1" || len(st.Members) != 1 || st.Members[0].Role != "voter" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := c.SetLimit(ctx, "k", fsm.Limit{Rate: 10, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	if lim, err := c.Limit(ctx, "k"); err != nil || lim != (fsm.Limit{Rate: 10, Burst: 2}) {
		t.Fatalf("Limit = %+v, %v", lim, err)
	}
	if n, err := c.Join(ctx, []string{"h:1", "h:2"}); err != nil || n != 2 {
		t.Fatalf("Join = %d, %v", n, err)
	}

	// Errors carry the server's message and unwrap to node's sentinels.
	_, err = c.Limit(ctx, "missing")
	var ae *admin.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || !errors.Is(err, raftpace.ErrUnknownKey) ||
		err.Error() != `node: limit "missing": unknown key` {
		t.Errorf("Limit(missing) = %v", err)
	}
	_, err = c.Join(ctx, []string{"bad"})
	if !errors.Is(err, raftpace.ErrInvalidRequest) || !strings.Contains(err.Error(), `"bad": must be host:port`) {
		t.Errorf("Join(bad) = %v", err)
	}
	_, err = c.Limit(ctx, "a b")
	if !errors.Is(err, raftpace.ErrInvalidRequest) || !strings.Contains(err.Error(), "contains whitespace") {
		t.Errorf("Limit(a b) = %v", err)
	}
	// Invalid limits are refused before the request (JSON has no NaN).
	for _, tc := range []struct {
		lim  fsm.Limit
		want string
	}{
		{fsm.Limit{Rate: 0, Burst: 1}, "Rate 0: must be > 0"},
		{fsm.Limit{Rate: -3, Burst: 1}, "Rate -3: must be > 0"},
		{fsm.Limit{Rate: nan(), Burst: 1}, "Rate NaN: must be finite"},
		{fsm.Limit{Rate: inf(), Burst: 1}, "Rate +Inf: must be finite"},
		{fsm.Limit{Rate: 1, Burst: 0}, "Burst 0: must be >= 1"},
	} {
		err := c.SetLimit(ctx, "k", tc.lim)
		if !errors.Is(err, raftpace.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetLimit(%+v) = %v, want %q", tc.lim, err, tc.want)
		}
	}
	f.err = fmt.Errorf("node: %w: context deadline exceeded", raftpace.ErrNoLeader)
	if _, err := c.Limits(ctx); !errors.Is(err, raftpace.ErrNoLeader) {
		t.Errorf("Limits with no leader = %v", err)
	}
	f.err = errors.New("boom")
	if _, err := c.Status(ctx); err == nil || err.Error() != "boom" {
		t.Errorf("Status = %v", err)
	}
}

func TestClient_Leave(t *testing.T) {
	f := newFake()
	srv, c := newServer(t, f)
	if err := c.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.left:
	default:
		t.Fatal("the node did not leave before the answer")
	}
	// A failed leave is reported with the node's message.
	f.mu.Lock()
	f.leaveErr = fmt.Errorf("node: leave: %w: context deadline exceeded", raftpace.ErrNoLeader)
	f.mu.Unlock()
	err := c.Leave(context.Background())
	<-f.left
	if !errors.Is(err, raftpace.ErrNoLeader) || !strings.Contains(err.Error(), "node: leave: no leader") {
		t.Errorf("Leave = %v", err)
	}
	// A body is ignored (but bounded).
	if code, body := call(t, srv, "POST", "/v1/leave", `{"whatever":1}`); code != 503 {
		t.Errorf("POST /v1/leave with a body: %d %s", code, body)
	}
	<-f.left
}

func TestClient_Unreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &admin.Client{Addr: addr}
	_, err = c.Status(context.Background())
	if !errors.Is(err, admin.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	want := "cannot reach agent at " + addr + ": "
	if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, "is it running? (--addr)") ||
		!strings.Contains(msg, "connection refused") {
		t.Errorf("message %q", msg)
	}

	// A server that never answers: the context's deadline ends the call.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c = &admin.Client{Addr: hang.URL}
	_, err = c.Status(ctx)
	if !errors.Is(err, admin.ErrUnreachable) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("hanging server: %v", err)
	}
}

func TestClient_NonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "proxy says no", http.StatusBadGateway)
	}))
	defer srv.Close()
	c := &admin.Client{Addr: srv.URL}
	_, err := c.Status(context.Background())
	var ae *admin.Error
	if !errors.As(err, &ae) || ae.StatusCode != 502 || !strings.Contains(err.Error(), "proxy says no") {
		t.Errorf("err = %v", err)
	}
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }
