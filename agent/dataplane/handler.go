package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/fsm"
)

// Node is what the data plane needs from a node. *node.Node implements it.
type Node interface {
	ReserveAll(ctx context.Context, wants []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error)
	Forfeit(raftpace.Reservation)
	Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error)
	PausedFor(key string) time.Duration
	AcquireSlots(ctx context.Context, keys []string, ttl, maxWait time.Duration) (raftpace.Slot, error)
	ReleaseSlot(ctx context.Context, s raftpace.Slot) error
	Limit(ctx context.Context, key string) (fsm.Limit, error)
	Remaining(ctx context.Context, key string) (raftpace.Remaining, error)
}

// MaxInFlight is how many data-plane requests are served at once by
// default. Each one in flight is a goroutine and, for /v1/wait and slots
// with max_wait, a connection held open for up to its timeout; past this
// many the agent sheds at once (503 overloaded) rather than let a runaway
// caller grow its memory and its scheduling delay without bound, which
// would make every caller's grants late. 4096 is far above what the
// workers of one host hold open when they behave (one or a few each).
const MaxInFlight = 4096

// Bounds of the request's seconds fields.
const (
	// MaxWaitSeconds bounds max_wait and timeout: a caller that would wait
	// longer should not hold a request open for it.
	MaxWaitSeconds = 600
	// DefaultTimeout is /v1/wait's timeout when the body gives none.
	DefaultTimeout = 60 * time.Second
	// DefaultTTL is a slot's ttl when the body gives none: the node's
	// default most (node.Config.MaxSlotTTL).
	DefaultTTL = 30 * time.Second
	// requestTimeout bounds the node calls that do not wait for the
	// caller (pause, release, limit).
	requestTimeout = 10 * time.Second
)

// Option configures NewHandler.
type Option func(*handler)

// WithMaxInFlight sets how many requests are served at once (default
// MaxInFlight); n < 1 keeps the default.
func WithMaxInFlight(n int) Option {
	return func(h *handler) {
		if n >= 1 {
			h.inflight = make(chan struct{}, n)
		}
	}
}

// NewHandler returns the data plane for n: the routes of docs/dataplane.md,
// with GET /v1/limits/KEY. It routes by hand, as admin does: the path is
// not cleaned, so keys such as ".." are addressed like any other.
func NewHandler(n Node, opts ...Option) http.Handler {
	h := &handler{n: n, inflight: make(chan struct{}, MaxInFlight), slots: map[string]raftpace.Slot{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Route prefixes.
const (
	reservePrefix = "/v1/reserve/"
	waitPrefix    = "/v1/wait/"
	forfeitPrefix = "/v1/forfeit/"
	pausesPrefix  = "/v1/pauses/"
	slotsPath     = "/v1/slots"
	slotsPrefix   = "/v1/slots/"
	// A reservation over several keys names them in its body.
	reserveAllPath  = "/v1/reserve"
	waitAllPath     = "/v1/wait"
	limitsPrefix    = "/v1/limits/"
	remainingPrefix = "/v1/remaining/"
)

// Serves reports whether path is one of the data plane's own routes (not
// GET /v1/limits/KEY, which the admin API serves on --http).
func Serves(path string) bool {
	for _, p := range []string{reservePrefix, waitPrefix, forfeitPrefix, pausesPrefix, slotsPrefix, remainingPrefix} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return path == slotsPath || path == reserveAllPath || path == waitAllPath
}

type handler struct {
	n        Node
	inflight chan struct{}

	mu        sync.Mutex
	slots     map[string]raftpace.Slot // handed out, kept until deadline + slotLinger
	nextPrune time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.inflight <- struct{}{}:
		defer func() { <-h.inflight }()
	default:
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusServiceUnavailable, "overloaded", fmt.Sprintf("the agent serves at most %d data-plane requests at once", cap(h.inflight)), nil)
		return
	}
	receipt := time.Now()
	path := r.URL.Path // already unescaped: "/v1/reserve/a%2Fb" gives key "a/b"
	key := func(prefix string) (string, bool) {
		k := strings.TrimPrefix(path, prefix)
		if err := fsm.ValidateKey(k); err != nil {
			invalid(w, "key", err.Error())
			return "", false
		}
		return k, true
	}
	switch {
	case path == reserveAllPath || path == waitAllPath:
		if allow(w, r, http.MethodPost) {
			h.reserve(w, r, "", receipt, path == waitAllPath)
		}
	case strings.HasPrefix(path, reservePrefix):
		if allow(w, r, http.MethodPost) {
			if k, ok := key(reservePrefix); ok {
				h.reserve(w, r, k, receipt, false)
			}
		}
	case strings.HasPrefix(path, waitPrefix):
		if allow(w, r, http.MethodPost) {
			if k, ok := key(waitPrefix); ok {
				h.reserve(w, r, k, receipt, true)
			}
		}
	case strings.HasPrefix(path, forfeitPrefix):
		if allow(w, r, http.MethodPost) {
			if k, ok := key(forfeitPrefix); ok {
				h.forfeit(w, r, k)
			}
		}
	case strings.HasPrefix(path, pausesPrefix):
		if allow(w, r, http.MethodPost, http.MethodGet) {
			if k, ok := key(pausesPrefix); ok {
				h.pause(w, r, k)
			}
		}
	case path == slotsPath:
		if allow(w, r, http.MethodPost) {
			h.acquire(w, r, receipt)
		}
	case strings.HasPrefix(path, slotsPrefix):
		if allow(w, r, http.MethodDelete) {
			h.release(w, r, strings.TrimPrefix(path, slotsPrefix))
		}
	case strings.HasPrefix(path, remainingPrefix):
		if allow(w, r, http.MethodGet) {
			if k, ok := key(remainingPrefix); ok {
				h.remaining(w, r, k)
			}
		}
	case strings.HasPrefix(path, limitsPrefix):
		if allow(w, r, http.MethodGet) {
			if k, ok := key(limitsPrefix); ok {
				h.limit(w, r, k)
			}
		}
	default:
		writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such endpoint: %s %s", r.Method, path), nil)
	}
}

// allow answers 405 unless r's method is one of methods. It is checked
// before the key, so a wrong method is 405 whatever the key.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeErr(w, http.StatusMethodNotAllowed, "method_not_allowed",
		fmt.Sprintf("method %s not allowed for %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(methods, ", ")), nil)
	return false
}

// writeErr answers {"error": msg, "code": code, extra...}.
func writeErr(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{}
	for k, v := range extra {
		body[k] = v
	}
	body["error"], body["code"] = msg, code
	admin.WriteJSON(w, status, body)
}

// invalid answers 400 invalid naming field.
func invalid(w http.ResponseWriter, field, msg string) {
	writeErr(w, http.StatusBadRequest, "invalid", msg, map[string]any{"field": field})
}

// readBody decodes r's body into v; an empty body leaves v's defaults. On
// failure it answers 400 naming the field when the decoder named one.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := admin.ReadBody(w, r, v)
	if err == nil || errors.Is(err, admin.ErrEmptyBody) {
		return true
	}
	field := "body"
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		field = te.Field
	} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if uq, err := strconv.Unquote(f); err == nil {
			field = uq
		}
	}
	invalid(w, field, admin.BodyProblem(err))
	return false
}

// seconds converts a field of seconds in [0, most] (nil: def) to a
// duration; false (400 answered) otherwise. positive refuses 0.
func seconds(w http.ResponseWriter, field string, v *float64, def time.Duration, most float64, positive bool) (time.Duration, bool) {
	if v == nil {
		return def, true
	}
	s := *v
	if math.IsNaN(s) || s < 0 || s > most || (positive && s == 0) {
		lo := "[0"
		if positive {
			lo = "(0"
		}
		invalid(w, field, fmt.Sprintf("field %q must be a number of seconds in %s, %v]; got %v", field, lo, most, s))
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}

// secs writes d as seconds, to the microsecond: rounded up when up, else down.
func secs(d time.Duration, up bool) float64 {
	us := d / time.Microsecond
	if up && d%time.Microsecond > 0 {
		us++
	}
	return float64(us) / 1e6
}

// retryAfter is the Retry-After header for d: whole seconds, at least 1.
func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10))
}

// nodeError answers a node's error per docs/dataplane.md's table; field
// names the field an ErrInvalidRequest is about.
func nodeError(w http.ResponseWriter, err error, field string) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	var pe *raftpace.PausedError
	var le *raftpace.LimitExceededError
	var ce *raftpace.ConcurrencyLimitError
	var qe *raftpace.QuotaExhaustedError
	switch {
	case errors.As(err, &qe): // before ErrLimitExceeded, which it also matches
		wait := max(0, time.Until(qe.Reset))
		retryAfter(w, wait)
		writeErr(w, http.StatusTooManyRequests, "quota_exhausted", msg, map[string]any{"wait": secs(wait, true), "key": qe.Key, "reset": qe.Reset.UTC().Format(time.RFC3339)})
	case errors.As(err, &pe):
		retryAfter(w, pe.Remaining)
		writeErr(w, http.StatusTooManyRequests, "paused", msg, map[string]any{"remaining": secs(pe.Remaining, true), "key": pe.Key})
	case errors.As(err, &le):
		retryAfter(w, le.Wait)
		writeErr(w, http.StatusTooManyRequests, "limit_exceeded", msg, map[string]any{"wait": secs(le.Wait, true), "key": le.Key})
	case errors.Is(err, raftpace.ErrLimitExceeded):
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, "limit_exceeded", msg, nil)
	case errors.As(err, &ce):
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, "concurrency_limit", msg, map[string]any{"full": nonNil(ce.Full)})
	case errors.Is(err, raftpace.ErrConcurrencyLimit):
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, "concurrency_limit", msg, map[string]any{"full": []string{}})
	case errors.Is(err, fsm.ErrInvalidKey): // the node's own check: a template's key
		invalid(w, "key", msg)
	case errors.Is(err, raftpace.ErrInvalidRequest):
		invalid(w, field, msg)
	case errors.Is(err, raftpace.ErrUnknownKey):
		writeErr(w, http.StatusNotFound, "unknown_key", msg, nil)
	case errors.Is(err, raftpace.ErrStopped):
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusServiceUnavailable, "stopped", msg, nil)
	case errors.Is(err, raftpace.ErrClosed):
		writeErr(w, http.StatusServiceUnavailable, "closed", msg, nil)
	case errors.Is(err, raftpace.ErrNoLeader), errors.Is(err, context.DeadlineExceeded):
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusServiceUnavailable, "no_leader", msg, nil)
	case errors.Is(err, context.Canceled):
		// The caller hung up: nobody reads this, but it is no 2xx.
		writeErr(w, http.StatusServiceUnavailable, "canceled", msg, nil)
	default:
		writeErr(w, http.StatusInternalServerError, "internal", msg, nil)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
