package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// pollReady asks /readyz until it answers 200, for at most 10 s, and
// returns the last answer.
func pollReady(t *testing.T, base string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, body := httpGet(t, base+"/readyz")
		if code == 200 || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTP_Observability checks the endpoints next to the admin API on a
// running single-node agent.
func TestHTTP_Observability(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, t.TempDir())
	base := "http://" + info.HTTPAddr
	mustRun(t, 0, "limit", "set", "k", "--rate", "30", "--addr", info.HTTPAddr)

	if code, ct, body := httpGet(t, base+"/healthz"); code != 200 || ct != "application/json" || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/healthz: %d %s %s", code, ct, body)
	}
	var ready struct {
		Status string `json:"status"`
		Ready  bool   `json:"ready"`
		Mode   string `json:"mode"`
	}
	// A readiness probe is polled, as a load balancer would: an elected
	// leader answers 503 until its barrier has applied, which may come
	// after the limit above committed (CI saw it once).
	code, body := pollReady(t, base)
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 200 || !ready.Ready || ready.Mode != "raft" {
		t.Errorf("/readyz: %d %s", code, body)
	}
	code, ct, body := httpGet(t, base+"/metrics")
	if code != 200 || !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics: %d %s", code, ct)
	}
	for _, want := range []string{"\nraftpace_ready 1\n", "\nraftpace_limit_rate{key=\"k\"} 30\n", "\nraftpace_mode{mode=\"raft\"} 1\n", "\nraftpace_raft_leader 1\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, ct, body = httpGet(t, base+"/")
	if code != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, `data-key="k" data-rate="30"`) {
		t.Errorf("/: %d %s\n%s", code, ct, body)
	}
	// The admin API is still there, and answers unknown paths itself.
	if code, _, body := httpGet(t, base+"/v1/status"); code != 200 || !strings.Contains(body, `"id":"solo1"`) {
		t.Errorf("/v1/status: %d %s", code, body)
	}
	if code, ct, _ := httpGet(t, base+"/index.html"); code != 404 || ct != "application/json" {
		t.Errorf("/index.html: %d %s", code, ct)
	}
	resp, err := http.Post(base+"/readyz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d", resp.StatusCode)
	}
	stop()
	if r := waitResult(t, done); r.code != 0 {
		t.Errorf("agent exit %d:\n%s", r.code, r.stderr)
	}
}

// TestHTTP_NotReady: a node waiting for a second node to bootstrap has no
// leader: /readyz answers 503 with the reason, /healthz 200.
func TestHTTP_NotReady(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, t.TempDir(), "--bootstrap-expect", "2")
	base := "http://" + info.HTTPAddr
	if code, _, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	code, ct, body := httpGet(t, base+"/readyz")
	var a struct {
		Ready  *bool  `json:"ready"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil || code != 503 || ct != "application/json" || a.Ready == nil || *a.Ready || a.Reason != "no leader known" {
		t.Errorf("/readyz: %d %s %s", code, ct, body)
	}
	if _, _, body := httpGet(t, base+"/metrics"); !strings.Contains(body, "\nraftpace_ready 0\n") || !strings.Contains(body, "\nraftpace_raft_has_leader 0\n") {
		t.Errorf("/metrics of a node without a leader:\n%s", body)
	}
	r := runCLI(t.Context(), nil, "status", "--addr", info.HTTPAddr)
	if r.code != 0 || !strings.Contains(r.stdout, "Leader:         (none)") || !strings.Contains(r.stdout, "NOT READY: no leader known") {
		t.Errorf("status: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	stop()
	waitResult(t, done)
}

// TestStatus_Watch refreshes until the context (SIGINT in main) ends, and
// exits 0.
func TestStatus_Watch(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	info, done := startAgent(t, ctx, t.TempDir())
	wctx, cancel := context.WithTimeout(t.Context(), 450*time.Millisecond)
	defer cancel()
	r := runCLI(wctx, nil, "status", "--watch", "--interval", "100ms", "--addr", info.HTTPAddr)
	if r.code != 0 {
		t.Fatalf("status --watch: exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stdout, "\x1b[H\x1b[2J"); n < 2 {
		t.Errorf("%d screens, want at least 2:\n%s", n, r.stdout)
	}
	if !strings.Contains(r.stdout, "Node:           solo1 (Leader, granting)") || !strings.Contains(r.stdout, "every 100ms") {
		t.Errorf("status --watch:\n%s", r.stdout)
	}
	if r := runCLI(t.Context(), nil, "status", "--watch", "--interval", "1ms", "--addr", info.HTTPAddr); r.code != 2 {
		t.Errorf("--interval 1ms: exit %d", r.code)
	}
	stop()
	waitResult(t, done)
}
