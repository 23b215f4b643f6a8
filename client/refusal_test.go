package client

import (
	"math"
	"net/http"
	"testing"
	"time"
)

var refusalNow = time.Date(2025, time.March, 4, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    string
		want time.Duration
		ok   bool
	}{
		{"seconds", "15", 15 * time.Second, true},
		{"zero", "0", 0, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"spaces", "  30 \t", 30 * time.Second, true},
		{"largest", "1000000000", 1e9 * time.Second, true},
		{"IMF-fixdate", "Tue, 04 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"RFC 850", "Tuesday, 04-Mar-25 12:01:00 GMT", time.Minute, true},
		{"asctime", "Tue Mar  4 12:00:10 2025", 10 * time.Second, true},
		{"date spaces", " Tue, 04 Mar 2025 12:00:30 GMT ", 30 * time.Second, true},
		{"past date", "Tue, 04 Mar 2025 11:00:00 GMT", 0, true},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"word", "abc", 0, false},
		{"negative", "-5", 0, false},
		{"plus", "+5", 0, false},
		{"decimal", "1.5", 0, false},
		{"unit", "5s", 0, false},
		{"inner space", "1 5", 0, false},
		{"too many seconds", "1000000001", 0, false},
		{"huge", "99999999999999999999999999", 0, false},
		{"bad date", "Tue, 32 Mar 2025 12:00:30 GMT", 0, false},
		{"two values", "5, 10", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tc.v, refusalNow)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestRefusalPolicyDelay(t *testing.T) {
	hdr := func(vs ...string) http.Header {
		h := http.Header{}
		for _, v := range vs {
			h.Add("Retry-After", v)
		}
		return h
	}
	for _, tc := range []struct {
		name     string
		p        RefusalPolicy
		h        http.Header
		attempt  int
		want     time.Duration
		fromHint bool
	}{
		{"seconds", RefusalPolicy{}, hdr("15"), 1, 15 * time.Second, true},
		{"hint ignores attempt", RefusalPolicy{}, hdr("15"), 9, 15 * time.Second, true},
		{"date", RefusalPolicy{}, hdr("Tue, 04 Mar 2025 12:02:00 GMT"), 1, 2 * time.Minute, true},
		{"zero clamps to 1s", RefusalPolicy{}, hdr("0"), 1, time.Second, true},
		{"past date clamps to 1s", RefusalPolicy{}, hdr("Mon, 03 Mar 2025 12:00:00 GMT"), 1, time.Second, true},
		{"clamped to default max", RefusalPolicy{}, hdr("3600"), 1, 10 * time.Minute, true},
		{"clamped to max", RefusalPolicy{Max: 30 * time.Second}, hdr("31"), 1, 30 * time.Second, true},
		{"largest seconds clamped", RefusalPolicy{}, hdr("1000000000"), 1, 10 * time.Minute, true},
		{"max below 1s still 1s", RefusalPolicy{Max: time.Millisecond}, hdr("5"), 1, time.Second, true},
		{"first of several", RefusalPolicy{}, hdr("5", "60"), 1, 5 * time.Second, true},
		{"malformed first of several", RefusalPolicy{}, hdr("soon", "60"), 1, time.Second, false},
		{"missing", RefusalPolicy{}, http.Header{}, 1, time.Second, false},
		{"nil header", RefusalPolicy{}, nil, 1, time.Second, false},
		{"abc", RefusalPolicy{}, hdr("abc"), 1, time.Second, false},
		{"negative", RefusalPolicy{}, hdr("-5"), 1, time.Second, false},
		{"decimal", RefusalPolicy{}, hdr("1.5"), 1, time.Second, false},
		{"empty", RefusalPolicy{}, hdr(""), 1, time.Second, false},
		{"huge", RefusalPolicy{}, hdr("99999999999999999999"), 1, time.Second, false},
		{"attempt 0 counts as 1", RefusalPolicy{}, nil, 0, time.Second, false},
		{"negative attempt", RefusalPolicy{}, nil, -3, time.Second, false},
		{"attempt 2", RefusalPolicy{}, nil, 2, 2 * time.Second, false},
		{"attempt 3", RefusalPolicy{}, nil, 3, 4 * time.Second, false},
		{"attempt 6", RefusalPolicy{}, nil, 6, 32 * time.Second, false},
		{"attempt 7 capped", RefusalPolicy{}, nil, 7, time.Minute, false},
		{"attempt 100 capped", RefusalPolicy{}, nil, 100, time.Minute, false},
		{"attempt max int", RefusalPolicy{}, nil, math.MaxInt, time.Minute, false},
		{"huge cap, max int", RefusalPolicy{BackoffCap: math.MaxInt64}, nil, math.MaxInt, math.MaxInt64, false},
		{"huge base", RefusalPolicy{BackoffBase: math.MaxInt64, BackoffCap: math.MaxInt64}, nil, 5, math.MaxInt64, false},
		{"custom base", RefusalPolicy{BackoffBase: 3 * time.Second, BackoffCap: 10 * time.Second}, nil, 2, 6 * time.Second, false},
		{"custom cap", RefusalPolicy{BackoffBase: 3 * time.Second, BackoffCap: 10 * time.Second}, nil, 3, 10 * time.Second, false},
		{"cap below base", RefusalPolicy{BackoffBase: 5 * time.Second, BackoffCap: 2 * time.Second}, nil, 1, 2 * time.Second, false},
		{"base below 1s", RefusalPolicy{BackoffBase: 100 * time.Millisecond}, nil, 2, time.Second, false},
		{"base below 1s grows", RefusalPolicy{BackoffBase: 100 * time.Millisecond}, nil, 5, 1600 * time.Millisecond, false},
		{"negative fields take defaults", RefusalPolicy{Max: -1, BackoffBase: -1, BackoffCap: -1}, nil, 2, 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, fromHint := tc.p.Delay(tc.h, refusalNow, tc.attempt)
			if got != tc.want || fromHint != tc.fromHint {
				t.Errorf("Delay = %v, %v; want %v, %v", got, fromHint, tc.want, tc.fromHint)
			}
			if got < time.Second {
				t.Errorf("Delay %v below 1s", got)
			}
		})
	}
}
