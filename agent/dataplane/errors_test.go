package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// TestNodeError maps every error of docs/dataplane.md's table, including
// those a one-node test cluster cannot be made to return.
func TestNodeError(t *testing.T) {
	for _, c := range []struct {
		err         error
		status      int
		code, retry string
	}{
		{&raftpace.LimitExceededError{Key: "k", Wait: 1500 * time.Millisecond}, 429, "limit_exceeded", "2"},
		{fmt.Errorf("x: %w", &raftpace.PausedError{Key: "k", Remaining: 12 * time.Second}), 429, "paused", "12"},
		{&raftpace.ConcurrencyLimitError{Keys: []string{"a"}, Full: []string{"a"}}, 429, "concurrency_limit", "1"},
		{fmt.Errorf("x: %w", raftpace.ErrUnknownKey), 404, "unknown_key", ""},
		{fmt.Errorf("x: %w", raftpace.ErrInvalidRequest), 400, "invalid", ""},
		{fmt.Errorf("x: %w", raftpace.ErrNoLeader), 503, "no_leader", "1"},
		{raftpace.ErrStopped, 503, "stopped", "1"},
		{raftpace.ErrClosed, 503, "closed", ""},
		{context.DeadlineExceeded, 503, "no_leader", "1"},
		{context.Canceled, 503, "canceled", ""},
		{errors.New("boom"), 500, "internal", ""},
	} {
		w := httptest.NewRecorder()
		nodeError(w, c.err, "n")
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: %v", c.err, err)
		}
		if w.Code != c.status || body["code"] != c.code || w.Header().Get("Retry-After") != c.retry || body["error"] == "" {
			t.Errorf("%v: %d %s Retry-After %q; want %d %s %q", c.err, w.Code, w.Body, w.Header().Get("Retry-After"), c.status, c.code, c.retry)
		}
		if c.code == "invalid" && body["field"] != "n" {
			t.Errorf("invalid without field: %s", w.Body)
		}
	}
	// A key the node refuses (a template's) names the key, whatever the
	// request's field.
	w := httptest.NewRecorder()
	nodeError(w, fmt.Errorf("node: reserve: %w: %w", raftpace.ErrInvalidRequest, fsm.ValidateEventKey("t:*")), "n")
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"key"`) {
		t.Errorf("a template's key: %d %s; want 400 naming field key", w.Code, w.Body)
	}
}
