package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// ErrUnauthorized is wrapped by the Client's errors when the agent
// answered 401: its admin API requires a bearer token and the request had
// none or another one.
var ErrUnauthorized = errors.New("admin: unauthorized")

// Option configures NewHandler.
type Option func(*handler)

// WithToken makes the handler require "Authorization: Bearer TOKEN" on every
// /v1/ route, answering 401 with a JSON error otherwise. Other paths (health
// and metrics endpoints: /healthz, /readyz, /metrics) stay open. An empty
// token turns the check off.
func WithToken(token string) Option {
	return func(h *handler) {
		if token != "" {
			sum := sha256.Sum256([]byte(token))
			h.tokenHash = &sum
		}
	}
}

// MinTokenLength is the shortest token ReadToken accepts.
const MinTokenLength = 16

// ReadToken reads a bearer token from a file: its content with surrounding
// whitespace removed, at least MinTokenLength characters and no whitespace
// or control characters inside.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return CheckToken(string(b), fmt.Sprintf("token file %q", path))
}

// CheckToken trims a token and checks it as ReadToken does; what names
// where it came from in the error.
func CheckToken(tok, what string) (string, error) {
	tok = strings.TrimSpace(tok)
	if len(tok) < MinTokenLength {
		return "", fmt.Errorf("%s: the token must be at least %d characters (for example: openssl rand -hex 32)", what, MinTokenLength)
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return "", fmt.Errorf("%s: the token must not contain whitespace or control characters", what)
		}
	}
	return tok, nil
}

// authorized checks r's bearer token when the handler has one; on failure
// it answers 401 and returns false.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.tokenHash == nil || !(r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/")) {
		return true
	}
	return h.checkBearer(w, r)
}

// checkBearer answers 401 and returns false unless r carries the token.
func (h *handler) checkBearer(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		unauthorized(w, "missing bearer token: this agent's admin API requires 'Authorization: Bearer TOKEN' "+
			"(raftpace commands: --token-file FILE or RAFTPACE_TOKEN)")
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], h.tokenHash[:]) != 1 {
		unauthorized(w, "invalid bearer token: it does not match this agent's --http-token-file")
		return false
	}
	return true
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="raftpace"`)
	writeJSON(w, http.StatusUnauthorized, ErrorResponse{Error: msg, Code: "unauthorized"})
}

// RequireToken wraps next so that it answers 401 unless the request carries
// "Authorization: Bearer TOKEN"; an empty token returns next unchanged. The
// agent puts its status page and metrics behind the admin token when it has
// one: they name keys, rates and members.
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	sum := sha256.Sum256([]byte(token))
	h := &handler{tokenHash: &sum}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.checkBearer(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}
