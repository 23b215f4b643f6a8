package admin

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// Routes of the refusal gate and the concurrency caps. POST
// /v1/pauses/KEY is the data plane's (package agent/dataplane serves it on
// --http and on the socket); Client.Pause calls it.
const (
	pausesPrefix = "/v1/pauses/"
	capsPrefix   = "/v1/caps/"
)

// pauseRequest and pauseAnswer are what Client.Pause sends to, and reads
// from, the data plane's POST /v1/pauses/KEY (docs/dataplane.md).
type pauseRequest struct {
	For string `json:"for"`
}

type pauseAnswer struct {
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

// gateNode is what the caps routes need; *node.Node implements it.
type gateNode interface {
	SetCap(ctx context.Context, key string, max int) error
	DeleteCap(ctx context.Context, key string) error
	Caps(ctx context.Context) (map[string]int, error)
}

// serveGate routes /v1/caps[/KEY]; false if the path is not one of them.
func (h *handler) serveGate(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	switch {
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
// force after it, through the data plane's route (an agent serves it on
// --http beside this API).
func (c *Client) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return 0, &Error{StatusCode: http.StatusBadRequest, Message: oneLine(err)}
	}
	var pr pauseAnswer
	err := c.do(ctx, http.MethodPost, pausesPrefix+url.PathEscape(key), pauseRequest{For: d.String()}, &pr, http.StatusOK)
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
