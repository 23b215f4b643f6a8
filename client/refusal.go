package client

import (
	"net/http"
	"strings"
	"time"
)

// Turning a refusal (429 Too Many Requests, 503 Service Unavailable) into
// the delay the fleet pauses for.

// maxRetryAfterSeconds is the largest delay-seconds ParseRetryAfter
// accepts; a larger number is garbage, not a hint.
const maxRetryAfterSeconds = 1_000_000_000

// minRefusalDelay is the least a refusal pauses for: whatever the header
// says, a refusal is never permission to retry at once.
const minRefusalDelay = time.Second

// Defaults of RefusalPolicy.
const (
	DefaultRefusalMax  = 10 * time.Minute
	DefaultBackoffBase = time.Second
	DefaultBackoffCap  = time.Minute
)

// ParseRetryAfter parses a Retry-After value (RFC 9110 section 10.2.3) into
// the delay it asks for, measured from now: either delay-seconds (a
// non-negative decimal integer, at most 1e9) or an HTTP-date in any of the
// three formats http.ParseTime accepts. A date already past gives 0, true.
// Surrounding spaces are ignored. Anything else (signs, fractions, too many
// seconds, empty) gives 0, false.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		var n int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				// An HTTP-date never starts with a digit.
				return 0, false
			}
			n = n*10 + int64(c-'0')
			if n > maxRetryAfterSeconds {
				return 0, false
			}
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// RefusalPolicy turns a refusal into a delay. Zero fields take their
// defaults (so the zero RefusalPolicy is ready to use):
//
//   - Max (default 10m): the longest a Retry-After hint may pause a key; a
//     longer hint is cut to Max.
//   - BackoffBase (default 1s): the delay of the first refusal without a
//     usable hint; it doubles with each consecutive refusal...
//   - BackoffCap (default 1m): ...up to BackoffCap.
//
// Whatever the fields say, a delay is never below 1s.
type RefusalPolicy struct {
	Max, BackoffBase, BackoffCap time.Duration
}

func (p RefusalPolicy) withDefaults() RefusalPolicy {
	if p.Max <= 0 {
		p.Max = DefaultRefusalMax
	}
	if p.BackoffBase <= 0 {
		p.BackoffBase = DefaultBackoffBase
	}
	if p.BackoffCap <= 0 {
		p.BackoffCap = DefaultBackoffCap
	}
	return p
}

// Delay returns how long to hold off after a refusal whose response
// headers are h, received at now; attempt counts the consecutive refusals
// of the key including this one (attempt < 1 counts as 1).
//
// A usable Retry-After hint (see ParseRetryAfter; of several values, the
// first) gives its delay clamped to [1s, Max], and fromHint is true.
// Without one (missing or malformed) the delay is exponential backoff,
// BackoffBase * 2^(attempt-1) capped at BackoffCap. Either way d >= 1s: a
// malformed hint is never permission to retry at once.
func (p RefusalPolicy) Delay(h http.Header, now time.Time, attempt int) (d time.Duration, fromHint bool) {
	p = p.withDefaults()
	if hint, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return max(min(hint, p.Max), minRefusalDelay), true
	}
	return max(p.backoff(attempt), minRefusalDelay), false
}

// backoff is BackoffBase * 2^(attempt-1), capped at BackoffCap, without
// overflow.
func (p RefusalPolicy) backoff(attempt int) time.Duration {
	d := p.BackoffBase
	for i := 1; i < attempt && d < p.BackoffCap; i++ {
		if d > p.BackoffCap/2 {
			return p.BackoffCap
		}
		d *= 2
	}
	return min(d, p.BackoffCap)
}
