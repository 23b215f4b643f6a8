package wire

import (
	"errors"
	"fmt"
	"time"
)

// What a node does with a request to the leader that failed: which
// failures another attempt may cure, how long it waits between attempts,
// and what an answer's code means to the caller. Every caller of the
// leader (package node and the rooms it gives these to) follows them.

// A retried request sleeps RetryBackoffMin first, then twice as long each
// time, at most RetryBackoffMax (NextBackoff).
const (
	RetryBackoffMin = time.Millisecond
	RetryBackoffMax = 50 * time.Millisecond
)

// NextBackoff is the sleep after one of backoff before the next retry.
func NextBackoff(backoff time.Duration) time.Duration {
	return min(2*backoff, RetryBackoffMax)
}

// ErrNoShare: the leader holds no part of the rate for the slots asked
// (no share renewed yet, or not that far ahead); the caller retries.
var ErrNoShare = errors.New("node: leader holds no share of the rate yet")

// Retryable reports whether a new attempt (at the same or a new leader)
// may cure err.
func Retryable(err error) bool {
	return errors.Is(err, ErrRetry) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoShare)
}

// LeaderErr turns a leader's answer code into the caller's error:
// retryable when the leader moved on or could not commit, else the
// sentinel the code stands for, naming what was asked.
func LeaderErr(what string, code uint8, msg string) error {
	err := ErrFor(code, msg)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader) || code == CodeUnavailable:
		return fmt.Errorf("%w: %w", ErrRetry, err)
	}
	return fmt.Errorf("node: %s: %w", what, err)
}

// LeaderCallTimeout bounds one request to the leader: its own maximum
// wait (the leader may hold it that long for a horizon) plus a little.
// Past it the leader is presumed paused or cut off and looked up again.
func LeaderCallTimeout(maxWait time.Duration) time.Duration {
	return min(maxWait, time.Second) + 500*time.Millisecond
}
