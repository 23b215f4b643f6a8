package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/raftpace/raftpace/client"
)

// Gubernator asks a gubernator v2 instance (its HTTP JSON API,
// /v1/GetRateLimits) for one hit per reservation, with GLOBAL behaviour:
// the instance answers from its own copy of the key's bucket and sends the
// hits to the key's owner asynchronously (every 100ms by default), which
// then broadcasts the bucket back. That keeps answers local and fast and
// lets the instances together admit more than the limit between syncs:
// the over-admission this bench shows beside raftpace's exact ceiling.
//
// The bucket is a leaky bucket (gubernator's closest to GCRA) of rate
// lim.Rate per second. Gubernator keeps time in milliseconds, so a bucket
// of burst 1 cannot leak faster than 1,000/s; the burst is raised to one
// millisecond's worth (lim.Rate/1000) where that is more than lim.Burst.
// Gubernator does not reserve ahead: a hit is under the limit (use it now)
// or over it (refused), so every grant has a zero wait.
type Gubernator struct {
	url   string
	lim   client.Limit
	burst int64
	grace time.Duration
	hc    *http.Client
}

// NewGubernator returns a pacer that calls the instance whose HTTP API is
// at addr (host:port). conns is the number of connections to keep open
// (the callers that share it).
func NewGubernator(addr string, lim client.Limit, conns int, grace time.Duration) (*Gubernator, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.MaxConnsPerHost = 0
	return &Gubernator{
		url:   "http://" + addr + "/v1/GetRateLimits",
		lim:   lim,
		burst: GubernatorBurst(lim),
		grace: grace,
		hc:    &http.Client{Transport: tr, Timeout: 10 * time.Second},
	}, nil
}

// GubernatorBurst is the leaky bucket's burst used for lim: its burst, or
// one millisecond of its rate if that is more (see Gubernator).
func GubernatorBurst(lim client.Limit) int64 {
	return max(int64(lim.Burst), int64(math.Ceil(lim.Rate/1000)))
}

type gubReq struct {
	Requests []gubRateLimit `json:"requests"`
}

type gubRateLimit struct {
	Name      string `json:"name"`
	UniqueKey string `json:"unique_key"`
	Hits      int64  `json:"hits,string"`
	Limit     int64  `json:"limit,string"`
	Duration  int64  `json:"duration,string"` // ms
	Algorithm string `json:"algorithm"`
	Behavior  string `json:"behavior"`
	Burst     int64  `json:"burst,string"`
}

type gubResp struct {
	Responses []struct {
		Status    string `json:"status"`
		ResetTime string `json:"reset_time"`
		Error     string `json:"error"`
	} `json:"responses"`
}

// ReserveN sends one hit (n must be 1): a grant now when the instance says
// UNDER_LIMIT, a refusal when it says OVER_LIMIT.
func (g *Gubernator) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	if err := one(key, n); err != nil {
		return client.Reservation{}, err
	}
	// rate per second as limit per duration; a fractional rate (7.5/s)
	// becomes a whole limit over a longer duration.
	limit, dur := int64(math.Round(g.lim.Rate)), int64(1000)
	if float64(limit) != g.lim.Rate {
		limit, dur = int64(math.Round(g.lim.Rate*1000)), 1000*1000
	}
	body, _ := json.Marshal(gubReq{Requests: []gubRateLimit{{
		Name: "raftpace-bench", UniqueKey: key, Hits: 1, Limit: limit, Duration: dur,
		Algorithm: "LEAKY_BUCKET", Behavior: "GLOBAL", Burst: g.burst,
	}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: gubernator: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := g.hc.Do(req)
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: %w", key, err)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	arrived := time.Now()
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: %w", key, err)
	}
	if resp.StatusCode != http.StatusOK {
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: %s: %s", key, resp.Status, bytes.TrimSpace(data))
	}
	var gr gubResp
	if err := json.Unmarshal(data, &gr); err != nil || len(gr.Responses) != 1 {
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: unreadable answer %q", key, data)
	}
	r := gr.Responses[0]
	switch {
	case r.Error != "":
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: %s", key, r.Error)
	case r.Status == "OVER_LIMIT":
		return client.Reservation{}, refused(key, maxWait+1, maxWait)
	case r.Status != "UNDER_LIMIT":
		return client.Reservation{}, fmt.Errorf("bench: gubernator: reserve %q: status %q", key, r.Status)
	}
	return remoteGrant(sent, arrived, 0, g.grace), nil
}

// Forfeit does nothing: the hit is not given back.
func (g *Gubernator) Forfeit(client.Reservation) {}

// Close closes idle connections.
func (g *Gubernator) Close() error {
	g.hc.CloseIdleConnections()
	return nil
}
