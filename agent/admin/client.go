package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/report"
)

// ErrUnreachable is wrapped by the Client's errors when no answer came
// from the agent at all (nothing listening, wrong address, timeout); the
// error is then an *UnreachableError.
var ErrUnreachable = errors.New("admin: agent unreachable")

// UnreachableError says that the agent at Addr did not answer.
type UnreachableError struct {
	Addr    string
	Timeout bool // the context ended before an answer came
	Err     error
}

func (e *UnreachableError) Error() string {
	if e.Timeout {
		return fmt.Sprintf("agent at %s did not answer in time: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("cannot reach agent at %s: %v; is it running? (--addr)", e.Addr, e.Err)
}

// Unwrap returns ErrUnreachable and the cause.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// Error is an error answer of the admin API. It unwraps to the node
// sentinel its status stands for: raftpace.ErrInvalidRequest (400),
// raftpace.ErrUnknownKey (404), raftpace.ErrNoLeader (503), or to ErrUnauthorized
// (401).
type Error struct {
	StatusCode int    // HTTP status
	Message    string // the server's message
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel for the status, or nil.
func (e *Error) Unwrap() error {
	switch e.StatusCode {
	case http.StatusBadRequest:
		return raftpace.ErrInvalidRequest
	case http.StatusNotFound:
		return raftpace.ErrUnknownKey
	case http.StatusServiceUnavailable:
		return raftpace.ErrNoLeader
	case http.StatusUnauthorized:
		return ErrUnauthorized
	}
	return nil
}

// Client calls an agent's admin API. The zero value is not usable: set
// Addr. Safe for concurrent use.
type Client struct {
	// Addr is the agent's admin address, host:port (an http:// or https://
	// URL is accepted too).
	Addr string
	// HTTP is the client used; nil means http.DefaultClient. Time limits
	// come from the contexts passed to each method.
	HTTP *http.Client
	// Token, when set, is sent as "Authorization: Bearer Token": the agent's
	// --http-token-file.
	Token string
	// TokenFile, when Token is empty, names a file holding the token (as
	// ReadToken reads it), read at every request.
	TokenFile string
}

// maxResponseBytes bounds what the client reads of one answer.
const maxResponseBytes = 64 << 20

func (c *Client) base() string {
	a := strings.TrimRight(c.Addr, "/")
	if strings.Contains(a, "://") {
		return a
	}
	return "http://" + a
}

// do sends a request with an optional JSON body and decodes a JSON answer
// into out (if non-nil) when the status is wantStatus.
func (c *Client) do(ctx context.Context, method, path string, in, out any, wantStatus int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("admin: encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, body)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	tok := c.Token
	if tok == "" && c.TokenFile != "" {
		if tok, err = ReadToken(c.TokenFile); err != nil {
			return fmt.Errorf("admin: --token-file: %w", err)
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.unreachable(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return c.unreachable(ctx, err)
	}
	if resp.StatusCode != wantStatus {
		var e ErrorResponse
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &Error{StatusCode: resp.StatusCode, Message: e.Error}
		}
		return &Error{StatusCode: resp.StatusCode, Message: fmt.Sprintf("agent at %s answered %s: %s",
			c.Addr, resp.Status, strings.TrimSpace(string(data)))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("admin: agent at %s sent an unreadable answer: %w", c.Addr, err)
		}
	}
	return nil
}

func (c *Client) unreachable(ctx context.Context, err error) error {
	// Drop net/http's `Get "http://...": ` prefix; keep the cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &UnreachableError{Addr: c.Addr, Timeout: ctx.Err() != nil, Err: err}
}

// Status returns the agent's node's view of the cluster (GET /v1/status).
func (c *Client) Status(ctx context.Context) (report.Status, error) {
	var st report.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st, http.StatusOK)
	return st, err
}

func limitPath(key string) string { return limitsPrefix + url.PathEscape(key) }

// SetLimit sets key's limit for the whole cluster.
// The key and limit are validated here too, with the server's rules and
// messages (JSON cannot carry a NaN or infinite rate to the server).
func (c *Client) SetLimit(ctx context.Context, key string, lim fsm.Limit) error {
	if err := fsm.ValidateKey(key); err != nil {
		return &Error{StatusCode: http.StatusBadRequest, Message: oneLine(err)}
	}
	if err := lim.Validate(); err != nil {
		return &Error{StatusCode: http.StatusBadRequest, Message: oneLine(err)}
	}
	return c.do(ctx, http.MethodPut, limitPath(key), LimitOf(lim), nil, http.StatusOK)
}

// Limit returns key's limit; the error unwraps to raftpace.ErrUnknownKey if
// none is set.
func (c *Client) Limit(ctx context.Context, key string) (fsm.Limit, error) {
	var kl KeyLimit
	if err := c.do(ctx, http.MethodGet, limitPath(key), nil, &kl, http.StatusOK); err != nil {
		return fsm.Limit{}, err
	}
	return kl.FSMLimit(), nil
}

// Remaining reads what key's limit has left, from the data plane's GET
// /v1/remaining/KEY (served on the agent's --http too).
func (c *Client) Remaining(ctx context.Context, key string) (Remaining, error) {
	var r Remaining
	err := c.do(ctx, http.MethodGet, "/v1/remaining/"+url.PathEscape(key), nil, &r, http.StatusOK)
	return r, err
}

// Limits returns every limit.
func (c *Client) Limits(ctx context.Context) (map[string]fsm.Limit, error) {
	var lr LimitsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/limits", nil, &lr, http.StatusOK); err != nil {
		return nil, err
	}
	out := make(map[string]fsm.Limit, len(lr.Limits))
	for k, l := range lr.Limits {
		out[k] = l.FSMLimit()
	}
	return out, nil
}

// Join asks the agent to join the given gossip addresses and returns how
// many answered.
func (c *Client) Join(ctx context.Context, addrs []string) (int, error) {
	var jr JoinResponse
	err := c.do(ctx, http.MethodPost, "/v1/join", JoinRequest{Addrs: addrs}, &jr, http.StatusOK)
	return jr.Contacted, err
}

// Leave makes the agent's node leave the cluster (raft and gossip) and
// returns once it has; an agent then exits. On error the node has not
// left and still runs.
func (c *Client) Leave(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/leave", nil, nil, http.StatusOK)
}
