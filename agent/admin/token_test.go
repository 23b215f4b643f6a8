package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/fsm"
)

const testToken = "0123456789abcdef0123456789abcdef"

func TestToken_Required(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(admin.NewHandler(f, admin.WithToken(testToken)))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	for _, tc := range []struct {
		name, auth string
		want       string
	}{
		{"no token", "", "missing bearer token"},
		{"wrong token", "Bearer " + strings.Repeat("x", 32), "invalid bearer token"},
		{"other scheme", "Basic " + testToken, "missing bearer token"},
		{"token without scheme", testToken, "missing bearer token"},
	} {
		for _, path := range []string{"/v1/status", "/v1/limits/k", "/v1/caps", "/v1/nope", "/v1"} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e admin.ErrorResponse
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || err != nil || !strings.Contains(e.Error, tc.want) {
				t.Errorf("%s %s: %d %q (%v), want 401 with %q", tc.name, path, resp.StatusCode, e.Error, err, tc.want)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("%s %s: WWW-Authenticate %q", tc.name, path, got)
			}
		}
	}

	// Nothing reached the node.
	if err := (&admin.Client{Addr: addr}).SetLimit(ctx, "k", fsm.Limit{Rate: 5, Burst: 1}); !errors.Is(err, admin.ErrUnauthorized) {
		t.Fatalf("SetLimit without a token: %v, want ErrUnauthorized", err)
	} else if !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("the error does not say how to send a token: %v", err)
	}
	if len(f.limits) != 0 {
		t.Fatalf("a limit was set without the token: %v", f.limits)
	}

	// With the token everything works, the client included.
	c := &admin.Client{Addr: addr, Token: testToken}
	if err := c.SetLimit(ctx, "k", fsm.Limit{Rate: 5, Burst: 1}); err != nil {
		t.Fatalf("SetLimit with the token: %v", err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status with the token: %v", err)
	}
	if _, err := c.Limit(ctx, "nope"); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Errorf("routes after the check still work: %v", err)
	}

	// Paths outside /v1/ are not checked: health endpoints stay open (this
	// handler has none, so 404 rather than 401).
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := call(t, srv, http.MethodGet, path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404 (no token check)", path, code, body)
		}
	}
}

func TestToken_Off(t *testing.T) {
	srv := httptest.NewServer(admin.NewHandler(newFake(), admin.WithToken("")))
	t.Cleanup(srv.Close)
	if code, body := call(t, srv, http.MethodGet, "/v1/status", ""); code != http.StatusOK {
		t.Fatalf("no token configured: %d %s", code, body)
	}
	// A client sending a token to an agent without one is fine.
	c := &admin.Client{Addr: srv.URL, Token: testToken}
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := admin.ReadToken(write("ok", "  "+testToken+"\n")); err != nil || tok != testToken {
		t.Fatalf("ReadToken = %q, %v", tok, err)
	}
	for name, content := range map[string]string{"short": "abc\n", "empty": "", "space": "0123456789 abcdef0123"} {
		if _, err := admin.ReadToken(write(name, content)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want an error naming the file", name, err)
		}
	}
	if _, err := admin.ReadToken(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
