package admin_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
)

func (f *fakeNode) SetCap(ctx context.Context, key string, max int) error {
	if err := f.record(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.caps == nil {
		f.caps = map[string]int{}
	}
	f.caps[key] = max
	return nil
}

func (f *fakeNode) DeleteCap(ctx context.Context, key string) error {
	if err := f.record(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.caps, key)
	return nil
}

func (f *fakeNode) Caps(ctx context.Context) (map[string]int, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.caps {
		out[k] = v
	}
	return out, nil
}

func TestHandler_GateRoutes(t *testing.T) {
	f := newFake()
	srv, cl := newServer(t, f)
	tests := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"PUT", "/v1/caps/llm", `{"max":5}`, 200, `"max":5`},
		{"PUT", "/v1/caps/llm", `{"max":0}`, 400, `must be 1..1000000`},
		{"PUT", "/v1/caps/llm", `{}`, 400, `must be 1..1000000`},
		{"GET", "/v1/caps", ``, 200, `"llm":5`},
		{"DELETE", "/v1/caps/llm", ``, 200, `"key":"llm"`},
		{"GET", "/v1/caps", ``, 200, `"caps":{}`},
	}
	for _, tt := range tests {
		code, body := call(t, srv, tt.method, tt.path, tt.body)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s %s %s: %d %s; want %d containing %q", tt.method, tt.path, tt.body, code, body, tt.code, tt.want)
		}
	}
	ctx := context.Background()
	// POST /v1/pauses/KEY is the data plane's (agent/dataplane), not this API's.
	if code, body := call(t, srv, "POST", "/v1/pauses/acme", `{"for":"15s"}`); code != http.StatusNotFound {
		t.Errorf("POST /v1/pauses/acme on the admin API: %d %s, want 404", code, body)
	}
	if err := cl.SetCap(ctx, "llm", 7); err != nil {
		t.Fatal(err)
	}
	if caps, err := cl.Caps(ctx); err != nil || caps["llm"] != 7 {
		t.Errorf("client Caps = %v, %v", caps, err)
	}
	f.mu.Lock()
	f.err = raftpace.ErrNoLeader
	f.mu.Unlock()
	var ae *admin.Error
	if err := cl.SetCap(ctx, "llm", 3); !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("set a cap without a leader: %v, want a 503", err)
	}
}
