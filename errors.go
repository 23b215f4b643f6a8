package raftpace

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by a node and the client. Detailed errors wrap one of these; test with
// errors.Is (and errors.As for *LimitExceededError).
var (
	// ErrLimitExceeded: the wait for the requested events exceeds the
	// caller's maximum wait. Nothing was consumed.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrUnknownKey: no limit is set for the key. raftpace never admits an
	// event for a key it has no rate for: set the limit first.
	ErrUnknownKey = errors.New("unknown key")
	// ErrNoLeader: no leader could be reached before the context ended.
	ErrNoLeader = errors.New("no leader")
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("node closed")
	// ErrInvalidRequest: a request's arguments were invalid (count, key, limit).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrStopped: the node has had no leader for longer than its fallback
	// budget (Config.FallbackFor) and admits nothing until one renews its
	// share. The fleet fails closed rather than risk the ceiling.
	ErrStopped = errors.New("stopped: fallback budget exhausted")
)

// LimitExceededError is returned when the wait would exceed the maximum the
// caller allowed. Wait is the delay the events would have needed at the time
// of the request; it is a hint, not a reservation.
type LimitExceededError struct {
	Key     string
	Wait    time.Duration
	MaxWait time.Duration
}

func (e *LimitExceededError) Error() string {
	return fmt.Sprintf("node: reserve %q: limit exceeded: would wait %v, maximum %v", e.Key, e.Wait, e.MaxWait)
}

func (e *LimitExceededError) Unwrap() error { return ErrLimitExceeded }

var (
	// ErrPaused: the key is paused (a remote side refused and said when to
	// come back, see Node.Pause) for longer than the caller's maximum wait.
	// Nothing was consumed and nothing was sent. A *PausedError carries the
	// remaining pause; it also matches ErrLimitExceeded, since a caller that
	// sheds on one should shed on the other.
	ErrPaused = errors.New("paused")
	// ErrConcurrencyLimit: every slot of a key's concurrency cap stayed in
	// use for the caller's whole maximum wait.
	ErrConcurrencyLimit = errors.New("concurrency limit")
	// ErrPolicyConflict: Register found the key already set to other values.
	ErrPolicyConflict = errors.New("policy conflict")
)

// PausedError is returned when a key's pause outlasts the caller's maximum
// wait. Remaining is the pause left when the request was refused, as this
// node measured it.
type PausedError struct {
	Key       string
	Remaining time.Duration
	MaxWait   time.Duration
}

func (e *PausedError) Error() string {
	return fmt.Sprintf("node: %q is paused for another %v (maximum wait %v)", e.Key, e.Remaining.Round(time.Millisecond), e.MaxWait)
}

// Is makes a PausedError match both ErrPaused and ErrLimitExceeded.
func (e *PausedError) Is(target error) bool {
	return target == ErrPaused || target == ErrLimitExceeded
}

// ConcurrencyLimitError is returned when no slot of Keys' caps came free
// within the caller's maximum wait. Full names the keys whose caps were full
// at the last attempt.
type ConcurrencyLimitError struct {
	Keys    []string
	Full    []string
	MaxWait time.Duration
}

func (e *ConcurrencyLimitError) Error() string {
	return fmt.Sprintf("node: acquire slot on %q: concurrency limit: %q full for the maximum wait %v", e.Keys, e.Full, e.MaxWait)
}

func (e *ConcurrencyLimitError) Unwrap() error { return ErrConcurrencyLimit }

// PolicyConflictError is returned by Register when the cluster already
// holds other values for the key. Nothing was changed.
type PolicyConflictError struct {
	Key                 string
	Registered, Current string
}

func (e *PolicyConflictError) Error() string {
	return fmt.Sprintf("node: register %q: policy conflict: registering %s, but the cluster has %s (change it with `raftpace limit set` or `raftpace slots set`)", e.Key, e.Registered, e.Current)
}

func (e *PolicyConflictError) Unwrap() error { return ErrPolicyConflict }

// ErrQuotaExhausted: the key's quota (a budget per calendar window) is
// spent for the current window. A *QuotaExhaustedError says when it
// resets; it also matches ErrLimitExceeded, since a caller that sheds on
// one should shed on the other.
var ErrQuotaExhausted = errors.New("quota exhausted")

// QuotaExhaustedError is returned when an event would pass the key's quota
// for its current window. Nothing was consumed. A quota's next window is
// never reserved ahead: ask again at Reset.
type QuotaExhaustedError struct {
	Key   string
	Quota int64
	Per   string    // "minute", "hour", "day" or "month"; "" when not known (from another node)
	Reset time.Time // when the next window begins
}

func (e *QuotaExhaustedError) Error() string {
	q := "its quota"
	if e.Per != "" {
		q = fmt.Sprintf("its quota of %d per %s", e.Quota, e.Per)
	}
	return fmt.Sprintf("node: %q: %s: %s is spent until %s (in %v)", e.Key, ErrQuotaExhausted, q, e.Reset.UTC().Format(time.RFC3339), time.Until(e.Reset).Round(time.Second))
}

// Is makes a QuotaExhaustedError match both ErrQuotaExhausted and
// ErrLimitExceeded.
func (e *QuotaExhaustedError) Is(target error) bool {
	return target == ErrQuotaExhausted || target == ErrLimitExceeded
}
