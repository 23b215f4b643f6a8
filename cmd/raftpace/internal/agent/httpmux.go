package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/agent/dataplane"
	"github.com/raftpace/raftpace/agent/metrics"
	"github.com/raftpace/raftpace/agent/web"
	"github.com/raftpace/raftpace/node"
)

// observedNode is what the observability endpoints read. *node.Node is one.
type observedNode interface {
	metrics.Node
	web.Node
}

// newHTTPHandler serves, on the agent's --http address, the observability
// endpoints next to the admin API:
//
//	/         the status page (HTML, read-only)
//	/metrics  Prometheus metrics (a private registry of this node)
//	/healthz  200 while the process serves HTTP
//	/readyz   200 when the node can admit under the promise, else 503 with
//	          {"ready":false,"reason":...}
//
// These four are exact paths; the data plane's routes (dataplane.Serves)
// go to dp under the admin API's token rule, and every other path to api
// (the admin API under /v1/, which routes and answers errors itself). With a token (the
// agent's --http-token-file), the page and the metrics require it like the
// admin API does (they name keys, rates and members); the health probes
// never do, since load balancers and supervisors call them.
func newHTTPHandler(n observedNode, api, dp http.Handler, token string) http.Handler {
	page := admin.RequireToken(token, web.Handler(n))
	dp = admin.RequireToken(token, dp)
	prom := admin.RequireToken(token, metrics.Handler(n))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			page.ServeHTTP(w, r)
		case "/metrics":
			prom.ServeHTTP(w, r)
		case "/healthz":
			if getOnly(w, r) {
				writeProbe(w, http.StatusOK, probeAnswer{Status: "ok"})
			}
		case "/readyz":
			if getOnly(w, r) {
				serveReady(w, r, n)
			}
		default:
			if dataplane.Serves(r.URL.Path) {
				dp.ServeHTTP(w, r)
				return
			}
			api.ServeHTTP(w, r)
		}
	})
}

// probeAnswer is the body of /healthz and /readyz.
type probeAnswer struct {
	Status string `json:"status"`           // ok, ready, not ready
	Ready  *bool  `json:"ready,omitempty"`  // /readyz only
	Reason string `json:"reason,omitempty"` // why not ready
	Mode   string `json:"mode,omitempty"`
	Leader string `json:"leader,omitempty"`
}

func serveReady(w http.ResponseWriter, r *http.Request, n observedNode) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := n.Status(ctx)
	var ok bool
	a := probeAnswer{}
	if err != nil {
		a.Reason = "status: " + err.Error()
	} else {
		ok, a.Reason = st.Ready()
		a.Mode, a.Leader = st.Mode, st.Leader
	}
	a.Ready = &ok
	code := http.StatusOK
	a.Status = "ready"
	if !ok {
		code, a.Status = http.StatusServiceUnavailable, "not ready"
	}
	writeProbe(w, code, a)
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeProbe(w, http.StatusMethodNotAllowed, probeAnswer{Status: "method not allowed"})
	return false
}

func writeProbe(w http.ResponseWriter, code int, a probeAnswer) {
	b, _ := json.Marshal(a)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

var _ observedNode = (*node.Node)(nil)
