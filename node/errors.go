package node

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by a Node. Detailed errors wrap one of these; test with
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
	// ErrInvalidConfig: Config failed validation.
	ErrInvalidConfig = errors.New("invalid config")
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
