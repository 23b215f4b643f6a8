package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// With a token, the page, the metrics and the data plane need it; the probes never do.
func TestHTTPHandler_TokenCoversPageAndMetrics(t *testing.T) {
	const tok = "0123456789abcdef0123"
	h := newHTTPHandler(nil, http.NotFoundHandler(), http.NotFoundHandler(), tok)
	for _, path := range []string{"/", "/metrics", "/v1/reserve/k", "/v1/slots"} {
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
