package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/report"
)

// Node is what the admin API needs from a node. *node.Node implements it.
type Node interface {
	Status(ctx context.Context) (report.Status, error)
	SetLimit(ctx context.Context, key string, lim fsm.Limit) error
	Limit(ctx context.Context, key string) (fsm.Limit, error)
	Limits(ctx context.Context) (map[string]fsm.Limit, error)
	Join(ctx context.Context, addrs []string) (int, error)
	Leave(ctx context.Context) error
	gateNode
}

const (
	// MaxBodyBytes is the largest request body the API reads.
	MaxBodyBytes = 64 << 10
	// RequestTimeout bounds the work done for one request.
	RequestTimeout = 10 * time.Second
)

// Limit is a limit as the API writes it.
type Limit struct {
	Rate   float64 `json:"rate"`
	Burst  int     `json:"burst"`
	DryRun bool    `json:"dry_run,omitempty"` // fsm.Limit.DryRun: admits everything, counts what it would not have
	Quota  string  `json:"quota,omitempty"`   // "100000/day": fsm.ParseQuota's form
}

// LimitOf and FSMLimit convert between the API's limit and the state's. A
// quota FSMLimit cannot read gives a limit Validate refuses.
func LimitOf(l fsm.Limit) Limit {
	return Limit{Rate: l.Rate, Burst: l.Burst, DryRun: l.DryRun, Quota: l.FormatQuota()}
}
func (l Limit) FSMLimit() fsm.Limit {
	out := fsm.Limit{Rate: l.Rate, Burst: l.Burst, DryRun: l.DryRun}
	if l.Quota != "" {
		var err error
		if out.Quota, out.Per, err = fsm.ParseQuota(l.Quota); err != nil {
			out.Quota, out.Per = -1, 0
		}
	}
	return out
}

// Remaining is what a key's limit has left, as the data plane's GET
// /v1/remaining/KEY answers it (docs/dataplane.md): raftpace.Remaining.
type Remaining struct {
	Key    string `json:"key"`
	Tokens int    `json:"tokens"`
	Burst  int    `json:"burst"`
	// The quota, when the limit has one (omitted otherwise).
	Quota       string `json:"quota,omitempty"`
	Used        *int64 `json:"used,omitempty"`
	Left        *int64 `json:"left,omitempty"`
	WindowStart string `json:"window_start,omitempty"` // RFC 3339, UTC
	Reset       string `json:"reset,omitempty"`
}

// RemainingOf is r as the API writes it.
func RemainingOf(r raftpace.Remaining) Remaining {
	out := Remaining{Key: r.Key, Tokens: r.Tokens, Burst: r.Burst}
	if r.Quota != 0 {
		out.Quota = fmt.Sprintf("%d/%s", r.Quota, r.Per)
		out.Used, out.Left = &r.Used, &r.Left
		out.WindowStart, out.Reset = r.WindowStart.UTC().Format(time.RFC3339), r.Reset.UTC().Format(time.RFC3339)
	}
	return out
}

// KeyLimit is one key's limit, the answer of GET and PUT /v1/limits/KEY.
type KeyLimit struct {
	Key string `json:"key"`
	Limit
}

// LimitsResponse is the answer of GET /v1/limits.
type LimitsResponse struct {
	Limits map[string]Limit `json:"limits"`
}

// JoinRequest is the body of POST /v1/join.
type JoinRequest struct {
	Addrs []string `json:"addrs"`
}

// JoinResponse is the answer of POST /v1/join.
type JoinResponse struct {
	Contacted int `json:"contacted"`
}

// LeaveResponse is the answer of POST /v1/leave.
type LeaveResponse struct {
	Status string `json:"status"`
}

// ErrorResponse is the body of every error answer. Code is set where the
// answer is shared with the data plane (401 "unauthorized").
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// setLimitRequest is the body of PUT /v1/limits/KEY. Pointers tell an
// absent field from a zero one.
type setLimitRequest struct {
	Rate   *float64 `json:"rate"`
	Burst  *int     `json:"burst"`
	DryRun bool     `json:"dry_run"` // absent: enforced
	Quota  string   `json:"quota"`   // absent: none
}

const limitsPrefix = "/v1/limits/"

// NewHandler returns the admin API for n. See the package documentation
// for its routes and errors. WithToken makes it require a bearer token.
func NewHandler(n Node, opts ...Option) http.Handler {
	h := &handler{n: n}
	for _, o := range opts {
		o(h)
	}
	return h
}

type handler struct {
	n         Node
	tokenHash *[32]byte // SHA-256 of the bearer token; nil: no token required
}

// ServeHTTP routes by hand instead of with http.ServeMux: the mux cleans
// paths (a key ".." would be redirected away) and answers errors in text.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if !h.authorized(w, r) {
		return
	}
	if h.serveGate(w, r) {
		return
	}
	switch {
	case path == "/v1/status":
		if allow(w, r, http.MethodGet) {
			h.status(w, r)
		}
	case path == "/v1/limits":
		if allow(w, r, http.MethodGet) {
			h.limits(w, r)
		}
	case strings.HasPrefix(path, limitsPrefix):
		// URL.Path is already unescaped: "/v1/limits/a%2Fb" gives key "a/b".
		key := strings.TrimPrefix(path, limitsPrefix)
		if !allow(w, r, http.MethodGet, http.MethodPut) {
			return
		}
		if err := fsm.ValidateKey(key); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if r.Method == http.MethodPut {
			h.setLimit(w, r, key)
		} else {
			h.limit(w, r, key)
		}
	case path == "/v1/join":
		if allow(w, r, http.MethodPost) {
			h.join(w, r)
		}
	case path == "/v1/leave":
		if allow(w, r, http.MethodPost) {
			h.leave(w, r)
		}
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, path))
	}
}

// allow answers 405 unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed,
		fmt.Sprintf("method %s not allowed for %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(methods, ", ")))
	return false
}

func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), RequestTimeout)
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	st, err := h.n.Status(ctx)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *handler) limits(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := requestContext(r)
	defer cancel()
	lims, err := h.n.Limits(ctx)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	resp := LimitsResponse{Limits: make(map[string]Limit, len(lims))}
	for k, l := range lims {
		resp.Limits[k] = LimitOf(l)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *handler) limit(w http.ResponseWriter, r *http.Request, key string) {
	ctx, cancel := requestContext(r)
	defer cancel()
	lim, err := h.n.Limit(ctx, key)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyLimit{Key: key, Limit: LimitOf(lim)})
}

func (h *handler) setLimit(w http.ResponseWriter, r *http.Request, key string) {
	var req setLimitRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Rate == nil {
		writeError(w, http.StatusBadRequest, `field "rate" is required`)
		return
	}
	lim := fsm.Limit{Rate: *req.Rate, Burst: 1, DryRun: req.DryRun}
	if req.Burst != nil {
		lim.Burst = *req.Burst
	}
	if req.Quota != "" {
		var err error
		if lim.Quota, lim.Per, err = fsm.ParseQuota(req.Quota); err != nil {
			writeError(w, http.StatusBadRequest, `field "quota": `+oneLine(err))
			return
		}
	}
	if err := lim.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, oneLine(err))
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if err := h.n.SetLimit(ctx, key, lim); err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyLimit{Key: key, Limit: LimitOf(lim)})
}

func (h *handler) join(w http.ResponseWriter, r *http.Request) {
	var req JoinRequest
	if !readJSON(w, r, &req) {
		return
	}
	if len(req.Addrs) == 0 {
		writeError(w, http.StatusBadRequest, `field "addrs" is required: a list of gossip addresses (host:port)`)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	count, err := h.n.Join(ctx, req.Addrs)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, JoinResponse{Contacted: count})
}

// leave makes the node leave and answers when it has: 200 {"status":"left"},
// or the error (the node then still runs). In an agent the node is closed
// by then and the agent exits; a graceful http.Server.Shutdown lets this
// answer out first.
func (h *handler) leave(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		// No body is expected; read (a bounded amount) so a keep-alive
		// connection stays usable.
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if err := h.n.Leave(ctx); err != nil {
		writeNodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, LeaveResponse{Status: "left"})
}

// ErrEmptyBody is returned by ReadBody for a body with no JSON value.
var ErrEmptyBody = errors.New("request body is empty: a JSON object is required")

// ReadBody decodes exactly one JSON value from r's body into v: at most
// MaxBodyBytes, unknown fields refused, nothing but whitespace after it.
// Its error says what was wrong: ErrEmptyBody for an empty body, an
// *http.MaxBytesError for one too large, else the decoder's error (a
// *json.UnmarshalTypeError names the field). The agent's data plane
// (agent/dataplane) reads its bodies with it too.
func ReadBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Exactly one value: anything but whitespace after it is an error.
		var tooBig *http.MaxBytesError
		switch _, terr := dec.Token(); {
		case terr == io.EOF:
		case errors.As(terr, &tooBig):
			err = terr
		default:
			err = errors.New("unexpected data after the JSON object")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil, errors.As(err, &tooBig):
		return err
	case errors.Is(err, io.EOF):
		return ErrEmptyBody
	}
	return err
}

// BodyProblem is the message for a ReadBody error.
func BodyProblem(err error) string {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)
	case errors.Is(err, ErrEmptyBody):
		return err.Error()
	}
	return "invalid JSON body: " + err.Error()
}

// readJSON decodes exactly one JSON object from r's body into v. On failure
// it answers 400 and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := ReadBody(w, r, v); err != nil {
		writeError(w, http.StatusBadRequest, BodyProblem(err))
		return false
	}
	return true
}

// StatusFor maps a node error to the HTTP status the API answers with.
func StatusFor(err error) int {
	switch {
	case errors.Is(err, raftpace.ErrInvalidRequest), errors.Is(err, fsm.ErrInvalidKey),
		errors.Is(err, fsm.ErrInvalidLimit), errors.Is(err, fsm.ErrInvalidID):
		return http.StatusBadRequest
	case errors.Is(err, raftpace.ErrUnknownKey):
		return http.StatusNotFound
	case errors.Is(err, raftpace.ErrNoLeader), errors.Is(err, raftpace.ErrClosed), errors.Is(err, raftpace.ErrStopped),
		errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func writeNodeError(w http.ResponseWriter, err error) {
	code := StatusFor(err)
	msg := oneLine(err)
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, raftpace.ErrNoLeader) {
		msg = fmt.Sprintf("timed out after %v: %s", RequestTimeout, msg)
	}
	writeError(w, code, msg)
}

// oneLine joins the lines of a (possibly errors.Join-ed) error with "; ".
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorResponse{Error: msg})
}

// WriteJSON answers code with v as one line of JSON (the agent's data
// plane answers with it too).
func WriteJSON(w http.ResponseWriter, code int, v any) { writeJSON(w, code, v) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = marshal(ErrorResponse{Error: "encoding the answer: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// marshal encodes v as one line of JSON, without escaping <, > and & (the
// answers are read by people with curl as much as by programs).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
