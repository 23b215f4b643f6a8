// Package gcra is the pure arithmetic of the generic cell rate algorithm
// (GCRA) that raftpace's leader uses to pace each key.
//
// Time is an int64 count of nanoseconds on the caller's monotonic scale (the
// leader uses nanoseconds since its own start); nothing here reads a clock,
// so every function is testable with explicit times.
//
// The model: a key with rate R and burst B has emission interval T = 1/R and
// tolerance tau = (B-1)*T. Its state is the theoretical arrival time TAT. A
// request for n events at time now may go at
//
//	start = max(now, TAT + (n-1)*T - tau)
//
// and moves TAT to max(now, TAT) + n*T. All n events are used at start, so
// the start is the time at which the last of them conforms; for n = 1 this is
// the familiar max(now, TAT - tau). Any sequence of grants made this way has
// at most R*W + B events in any window of length W.
package gcra

import (
	"errors"
	"fmt"
	"math"
)

// ErrTooMany is returned when a request asks for more events than the burst:
// such a request can never conform.
var ErrTooMany = errors.New("gcra: request exceeds burst")

// Params are the pacing parameters of one key.
type Params struct {
	Interval  int64 // T, nanoseconds between events at the steady rate; >= 1
	Tolerance int64 // tau = (Burst-1)*T
	Burst     int   // B >= 1
}

// NewParams derives Params from an emission interval and a burst. It assumes
// both were validated (interval >= 1ns, burst >= 1).
func NewParams(interval int64, burst int) Params {
	if interval < 1 {
		interval = 1
	}
	if burst < 1 {
		burst = 1
	}
	tol := int64(burst-1) * interval
	if burst > 1 && tol/int64(burst-1) != interval { // overflow: cap, never wrap negative
		tol = math.MaxInt64 / 4
	}
	return Params{Interval: interval, Tolerance: tol, Burst: burst}
}

// Reserve computes the admission of n events at time now for a key whose
// theoretical arrival time is tat. It returns when the events may go and the
// key's new TAT; it changes nothing, so the caller may still decline (for
// example when start is later than the caller is willing to wait, or newTAT
// lies beyond a committed horizon).
func Reserve(tat int64, p Params, now int64, n int) (start, newTAT int64, err error) {
	if n < 1 {
		return 0, 0, fmt.Errorf("gcra: count %d: must be at least 1", n)
	}
	if n > p.Burst {
		return 0, 0, fmt.Errorf("%w: count %d, burst %d", ErrTooMany, n, p.Burst)
	}
	span := int64(n) * p.Interval
	start = tat + span - p.Interval - p.Tolerance
	if start < now {
		start = now
	}
	newTAT = max(now, tat) + span
	return start, newTAT, nil
}
