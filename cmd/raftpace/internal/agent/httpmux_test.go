package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// With a token, the page and the metrics need it; the probes never do.
func TestHTTPHandler_TokenCoversPageAndMetrics(t *testing.T) {
	const tok = "0123456789abcdef0123"
	h := newHTTPHandler(nil, http.NotFoundHandler(), tok)
	for _, path := range []string{"/", "/metrics"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /healthz without the token: %d, want 200", rec.Code)
	}
}
