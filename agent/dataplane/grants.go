package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/fsm"
)

// ReserveRequest is the body of POST /v1/reserve/KEY and /v1/wait/KEY
// (Timeout for wait, MaxWait for reserve), and of POST /v1/reserve and
// /v1/wait, which name their keys in Keys instead (each with its own n).
// Pointers tell an absent field from a zero one.
type ReserveRequest struct {
	N       *int       `json:"n,omitempty"`
	Keys    []WantBody `json:"keys,omitempty"`
	MaxWait *float64   `json:"max_wait,omitempty"`
	Timeout *float64   `json:"timeout,omitempty"`
}

// WantBody is one key of a reservation over several keys.
type WantBody struct {
	Key string `json:"key"`
	N   *int   `json:"n,omitempty"`
}

// Grant is the answer of a granted reserve or wait: seconds on the
// agent's clock from the moment of the answer (see docs/dataplane.md).
type Grant struct {
	Wait  float64 `json:"wait"`
	UseBy float64 `json:"use_by"`
	Held  float64 `json:"held"`
}

// ForfeitAnswer is the answer of POST /v1/forfeit/KEY.
type ForfeitAnswer struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// lateAttempts is how many grants in a row may turn out unusable by the
// time they would be answered (past their use-by: the agent itself was
// stalled) before the request is refused rather than asked again.
const lateAttempts = 3

// count reads the "n" field: default 1, at most fsm.MaxBurst.
func count(w http.ResponseWriter, n *int) (int, bool) {
	if n == nil {
		return 1, true
	}
	if *n < 1 || *n > fsm.MaxBurst {
		invalid(w, "n", fmt.Sprintf(`field "n" must be 1..the key's burst; got %d`, *n))
		return 0, false
	}
	return *n, true
}

// wantsOf reads the keys of a reservation: key from the path with the
// body's "n", or (key "") the body's "keys", each with its own "n".
func wantsOf(w http.ResponseWriter, key string, req ReserveRequest) ([]raftpace.Want, bool) {
	if key != "" {
		if req.Keys != nil {
			invalid(w, "keys", `field "keys" belongs to POST /v1/reserve and /v1/wait without a key in the path`)
			return nil, false
		}
		n, ok := count(w, req.N)
		return []raftpace.Want{{Key: key, Count: n}}, ok
	}
	if req.N != nil {
		invalid(w, "n", `field "n" goes inside each entry of "keys"`)
		return nil, false
	}
	if len(req.Keys) == 0 || len(req.Keys) > raftpace.MaxWants {
		invalid(w, "keys", fmt.Sprintf(`field "keys" must list 1 to %d keys, each {"key": KEY, "n": N}; got %d`, raftpace.MaxWants, len(req.Keys)))
		return nil, false
	}
	wants := make([]raftpace.Want, len(req.Keys))
	for i, k := range req.Keys {
		if err := fsm.ValidateKey(k.Key); err != nil {
			invalid(w, "keys", fmt.Sprintf("keys[%d]: %v", i, err))
			return nil, false
		}
		n, ok := count(w, k.N)
		if !ok {
			return nil, false
		}
		wants[i] = raftpace.Want{Key: k.Key, Count: n}
	}
	return wants, true
}

// reserve serves /v1/reserve (hold false: answer at once) and /v1/wait
// (hold true: reserve with max_wait = timeout, hold the request until the
// slot's time and answer wait 0; a caller that hangs up meanwhile
// forfeits the slot).
func (h *handler) reserve(w http.ResponseWriter, r *http.Request, key string, receipt time.Time, hold bool) {
	var req ReserveRequest
	if !readBody(w, r, &req) {
		return
	}
	field, other, absent, def := "max_wait", req.Timeout, "timeout", time.Duration(0)
	v := req.MaxWait
	if hold {
		field, other, absent, def, v = "timeout", req.MaxWait, "max_wait", DefaultTimeout, req.Timeout
	}
	if other != nil {
		invalid(w, absent, fmt.Sprintf("field %q belongs to the other route; this one takes %q", absent, field))
		return
	}
	wants, ok := wantsOf(w, key, req)
	if !ok {
		return
	}
	maxWait, ok := seconds(w, field, v, def, MaxWaitSeconds, false)
	if !ok {
		return
	}
	if hold {
		// The request is held longer than an http.Server's ReadTimeout
		// may allow: a read deadline passing while the handler runs would
		// end the request's context as if the caller had hung up. The
		// body is read; only a hang-up should end it now.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWait+requestTimeout)
	defer cancel()
	deadline := receipt.Add(maxWait)
	for range lateAttempts {
		res, err := h.n.ReserveAll(ctx, wants, max(0, time.Until(deadline)))
		if err != nil {
			field := "n" // the key is the path's, checked: the count is left
			if key == "" {
				field = "keys"
			}
			nodeError(w, err, field)
			return
		}
		if d := time.Until(res.At); hold && d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				h.n.Forfeit(res)
				nodeError(w, fmt.Errorf("wait %s: %w", raftpace.KeysOf(wants), ctx.Err()), "")
				return
			}
		}
		if h.answerGrant(w, res, receipt) {
			return
		}
	}
	tooLate(w)
}

// answerGrant answers res unless it can no longer be used by the time of
// the answer (then it forfeits it and returns false: ask again).
func (h *handler) answerGrant(w http.ResponseWriter, res raftpace.Reservation, receipt time.Time) bool {
	now := time.Now() // t_answer: taken once, just before writing
	g := Grant{
		Wait:  secs(max(0, res.At.Sub(now)), true),
		UseBy: secs(res.UseBy.Sub(now), false),
		Held:  secs(now.Sub(receipt), false),
	}
	if g.UseBy < g.Wait || g.UseBy < 0 {
		h.n.Forfeit(res)
		return false
	}
	admin.WriteJSON(w, http.StatusOK, g)
	return true
}

func tooLate(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeErr(w, http.StatusServiceUnavailable, "overloaded",
		fmt.Sprintf("%d grants in a row were past their use-by before they could be answered (the agent is stalled)", lateAttempts), nil)
}

// forfeitRequest is the body of POST /v1/forfeit/KEY.
type forfeitRequest struct {
	N *int `json:"n,omitempty"`
}

func (h *handler) forfeit(w http.ResponseWriter, r *http.Request, key string) {
	var req forfeitRequest
	if !readBody(w, r, &req) {
		return
	}
	n, ok := count(w, req.N)
	if !ok {
		return
	}
	h.n.Forfeit(raftpace.Reservation{}) // one grant of n events
	admin.WriteJSON(w, http.StatusOK, ForfeitAnswer{Key: key, N: n})
}

// limit answers GET /v1/limits/KEY as the admin API does.
func (h *handler) limit(w http.ResponseWriter, r *http.Request, key string) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	lim, err := h.n.Limit(ctx, key)
	if err != nil {
		nodeError(w, err, "key")
		return
	}
	admin.WriteJSON(w, http.StatusOK, admin.KeyLimit{Key: key, Limit: admin.LimitOf(lim)})
}

func (h *handler) remaining(w http.ResponseWriter, r *http.Request, key string) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	rem, err := h.n.Remaining(ctx, key)
	if err != nil {
		nodeError(w, err, "key")
		return
	}
	admin.WriteJSON(w, http.StatusOK, admin.RemainingOf(rem))
}
