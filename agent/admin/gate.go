package admin

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// Routes of the refusal gate and the concurrency caps.
const (
	pausesPrefix = "/v1/pauses/"
	capsPrefix   = "/v1/caps/"
)

// PauseRequest is the body of POST /v1/pauses/KEY: a Go duration ("15s").
type PauseRequest struct {
	For string `json:"for"`
}

// PauseResponse answers POST /v1/pauses/KEY: the pause in force after the
// request (a longer one already in force stays).
type PauseResponse struct {
	Key         string        `json:"key"`
	Remaining   string        `json:"remaining"`
	RemainingNS time.Duration `json:"remaining_ns"`
}

// CapRequest is the body of PUT /v1/caps/KEY.
type CapRequest struct {
	Max *int `json:"max"`
}

// KeyCap is one key's cap, the answer of PUT /v1/caps/KEY.
type KeyCap struct {
	Key string `json:"key"`
	Max int    `json:"max"`
}

// CapsResponse is the answer of GET /v1/caps.
type CapsResponse struct {
	Caps map[string]int `json:"caps"`
}

// gateNode is what the gate routes need; *node.Node implements it.
type gateNode interface {
	Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error)
	SetCap(ctx context.Context, key string, max int) error
	DeleteCap(ctx context.Context, key string) error
	Caps(ctx context.Context) (map[string]int, error)
}

// serveGate routes /v1/pauses/KEY and /v1/caps[/KEY]; false if the path
// is not one of them.
func (h *handler) serveGate(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, pausesPrefix):
		key := strings.TrimPrefix(path, pausesPrefix)
		if allow(w, r, http.MethodPost) && validKey(w, key) {
			h.pause(w, r, key)
		}
	case path == "/v1/caps":
		if allow(w, r, http.MethodGet) {
			ctx, cancel := requestContext(r)
			defer cancel()
			caps, err := h.n.Caps(ctx)
			if err != nil {
				writeNodeError(w, err)
				return true
			}
			writeJSON(w, http.StatusOK, CapsResponse{Caps: caps})
		}
	case strings.HasPrefix(path, capsPrefix):
		key := strings.TrimPrefix(path, capsPrefix)
		if !allow(w, r, http.MethodPut, http.MethodDelete) || !validKey(w, key) {
			return true
		}
		if r.Method == http.MethodDelete {
			ctx, cancel := requestContext(r)
			defer cancel()
			if err := h.n.DeleteCap(ctx, key); err != nil {
				writeNodeError(w, err)
				return true
			}
			writeJSON(w, http.StatusOK, KeyCap{Key: key})
			return true
		}
		h.setCap(w, r, key)
	default:
		return false
	}
	return true
}

func validKey(w http.ResponseWriter, key string) bool {
	if err := fsm.ValidateKey(key); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request, key string) {
	var req PauseRequest
	if !readJSON(w, r, &req) {
		return
	}
	d, err := time.ParseDuration(req.For)
	if err != nil || d <= 0 || d > fsm.MaxPause {
		writeError(w, http.StatusBadRequest, `field "for" must be a duration in (0, `+fsm.MaxPause.String()+`], like "15s"; got `+quote(req.For))
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	rem, err := h.n.Pause(ctx, key, d)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, PauseResponse{Key: key, Remaining: rem.Round(time.Millisecond).String(), RemainingNS: rem})
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}

func (h *handler) setCap(w http.ResponseWriter, r *http.Request, key string) {
	var req CapRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Max == nil || *req.Max < 1 || *req.Max > fsm.MaxCap {
		writeError(w, http.StatusBadRequest, `field "max" is required and must be 1..1000000: the most slots held at once`)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if err := h.n.SetCap(ctx, key, *req.Max); err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyCap{Key: key, Max: *req.Max})
}

// Pause records a fleet-wide pause of key for d and returns the pause in
// force after it.
func (c *Client) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return 0, &Error{StatusCode: http.StatusBadRequest, Message: oneLine(err)}
	}
	var pr PauseResponse
	err := c.do(ctx, http.MethodPost, pausesPrefix+url.PathEscape(key), PauseRequest{For: d.String()}, &pr, http.StatusOK)
	return pr.RemainingNS, err
}

// SetCap sets key's concurrency cap for the whole cluster.
func (c *Client) SetCap(ctx context.Context, key string, max int) error {
	if err := fsm.ValidateKey(key); err != nil {
		return &Error{StatusCode: http.StatusBadRequest, Message: oneLine(err)}
	}
	return c.do(ctx, http.MethodPut, capsPrefix+url.PathEscape(key), CapRequest{Max: &max}, nil, http.StatusOK)
}

// DeleteCap removes key's cap.
func (c *Client) DeleteCap(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodDelete, capsPrefix+url.PathEscape(key), nil, nil, http.StatusOK)
}

// Caps returns every cap.
func (c *Client) Caps(ctx context.Context) (map[string]int, error) {
	var cr CapsResponse
	err := c.do(ctx, http.MethodGet, "/v1/caps", nil, &cr, http.StatusOK)
	return cr.Caps, err
}
