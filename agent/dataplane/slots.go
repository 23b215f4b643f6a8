package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/fsm"
)

// PauseRequest is the body of POST /v1/pauses/KEY: Seconds, or the admin
// API's For (a Go duration, "30s"); exactly one.
type PauseRequest struct {
	Seconds *float64 `json:"seconds,omitempty"`
	For     *string  `json:"for,omitempty"`
}

// PauseAnswer answers POST and GET /v1/pauses/KEY: the pause in force.
type PauseAnswer struct {
	Key         string        `json:"key"`
	RemainingS  float64       `json:"remaining_s"`
	Remaining   string        `json:"remaining"`
	RemainingNS time.Duration `json:"remaining_ns"`
}

// SlotsRequest is the body of POST /v1/slots.
type SlotsRequest struct {
	Keys    []string `json:"keys"`
	TTL     *float64 `json:"ttl,omitempty"`
	MaxWait *float64 `json:"max_wait,omitempty"`
}

// SlotAnswer answers a granted POST /v1/slots: Deadline and Held are
// seconds on the agent's clock from the answer, as a grant's.
type SlotAnswer struct {
	ID       string   `json:"id"`
	Keys     []string `json:"keys"`
	Deadline float64  `json:"deadline"`
	Held     float64  `json:"held"`
}

// slotLinger is how long past its deadline a slot's ID is still known, so
// that a late DELETE of it answers 204 rather than unknown_slot.
const slotLinger = time.Minute

func (h *handler) pause(w http.ResponseWriter, r *http.Request, key string) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var d time.Duration
	if r.Method == http.MethodPost {
		var req PauseRequest
		if !readBody(w, r, &req) {
			return
		}
		var ok bool
		switch {
		case req.Seconds != nil && req.For != nil:
			invalid(w, "seconds", `give "seconds" or "for", not both`)
			return
		case req.For != nil:
			var err error
			d, err = time.ParseDuration(*req.For)
			if err != nil || d <= 0 || d > fsm.MaxPause {
				invalid(w, "for", fmt.Sprintf(`field "for" must be a duration in (0, %v], like "30s"`, fsm.MaxPause))
				return
			}
		case req.Seconds != nil:
			if d, ok = seconds(w, "seconds", req.Seconds, 0, fsm.MaxPause.Seconds(), true); !ok {
				return
			}
		default:
			invalid(w, "seconds", `field "seconds" is required: the pause, in (0, 86400]`)
			return
		}
	}
	rem := h.n.PausedFor(key)
	if r.Method == http.MethodPost {
		var err error
		if rem, err = h.n.Pause(ctx, key, d); err != nil {
			nodeError(w, err, "seconds")
			return
		}
	}
	admin.WriteJSON(w, http.StatusOK, PauseAnswer{Key: key, RemainingS: secs(rem, false),
		Remaining: rem.Round(time.Millisecond).String(), RemainingNS: rem})
}

func (h *handler) acquire(w http.ResponseWriter, r *http.Request, receipt time.Time) {
	var req SlotsRequest
	if !readBody(w, r, &req) {
		return
	}
	if len(req.Keys) == 0 {
		invalid(w, "keys", `field "keys" is required: the keys to take one slot of each`)
		return
	}
	for _, k := range req.Keys {
		if err := fsm.ValidateKey(k); err != nil {
			invalid(w, "keys", err.Error())
			return
		}
	}
	ttl, ok := seconds(w, "ttl", req.TTL, DefaultTTL, fsm.MaxSlotTTL.Seconds(), true)
	if !ok {
		return
	}
	maxWait, ok := seconds(w, "max_wait", req.MaxWait, 0, MaxWaitSeconds, false)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWait+requestTimeout)
	defer cancel()
	s, err := h.n.AcquireSlots(ctx, req.Keys, ttl, maxWait)
	if err != nil {
		nodeError(w, err, "ttl") // the node's only own check is the ttl's bound
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	id := "s-" + hex.EncodeToString(b[:])
	now := time.Now()
	h.mu.Lock()
	h.pruneLocked(now)
	h.slots[id] = s
	h.mu.Unlock()
	if r.Context().Err() != nil {
		// The caller hung up while waiting for room: give the slot back.
		h.releaseID(id)
		nodeError(w, r.Context().Err(), "")
		return
	}
	admin.WriteJSON(w, http.StatusOK, SlotAnswer{ID: id, Keys: s.Keys,
		Deadline: secs(s.Deadline.Sub(now), false), Held: secs(now.Sub(receipt), false)})
}

// pruneLocked forgets slots slotLinger past their deadline, at most once
// a second.
func (h *handler) pruneLocked(now time.Time) {
	if now.Before(h.nextPrune) {
		return
	}
	h.nextPrune = now.Add(time.Second)
	for id, s := range h.slots {
		if now.After(s.Deadline.Add(slotLinger)) {
			delete(h.slots, id)
		}
	}
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, id string) {
	h.mu.Lock()
	h.pruneLocked(time.Now())
	_, ok := h.slots[id]
	h.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusNotFound, "unknown_slot",
			fmt.Sprintf("this agent holds no slot %q (it restarted, or the slot ended over %v ago); it ends at its deadline", id, slotLinger), nil)
		return
	}
	if err := h.releaseID(id); err != nil {
		nodeError(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// releaseID gives the slot back unless it is past its deadline or already
// released (kept in the map with a zero ID until it lingers out).
func (h *handler) releaseID(id string) error {
	h.mu.Lock()
	s, ok := h.slots[id]
	if !ok || s.ID == "" || time.Now().After(s.Deadline) {
		h.mu.Unlock()
		return nil
	}
	h.slots[id] = raftpace.Slot{Deadline: s.Deadline}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := h.n.ReleaseSlot(ctx, s); err != nil {
		h.mu.Lock()
		h.slots[id] = s // the caller may try again
		h.mu.Unlock()
		return err
	}
	return nil
}
