package fsm

import (
	"fmt"
	"strings"
	"time"
)

// Quotas: a limit may carry a budget of Quota events per calendar window
// of its Per (a minute, an hour, a day or a month), beside its rate.
//
// Windows are calendar-aligned in UTC, on the leader's wall clock: a day
// runs from 00:00:00 UTC to the next, a month from the 1st. Not sliding:
// a budget that resets at a known instant is what the quotas of outside
// APIs are, and it needs one count per key, not a history.
//
// The state holds, per key, the count of its current window that the
// leader committed ahead of use (CommitQuotas): the leader grants only
// under it, and a new leader starts its own count at it, so a leader
// change may lose part of a committed batch, never spend a slot twice.

// Period is the length of a quota's calendar window.
type Period uint8

// Periods. Values are part of the encoding and never reused; 0 is none.
const (
	PerMinute Period = 1
	PerHour   Period = 2
	PerDay    Period = 3
	PerMonth  Period = 4
)

// MaxQuota bounds a limit's Quota and a committed count.
const MaxQuota = 1 << 50

var periodNames = [...]string{PerMinute: "minute", PerHour: "hour", PerDay: "day", PerMonth: "month"}

// String is "minute", "hour", "day" or "month"; "" for none.
func (p Period) String() string {
	if p.valid() || p == 0 {
		return periodNames[p]
	}
	return fmt.Sprintf("Period(%d)", uint8(p))
}

func (p Period) valid() bool { return p >= PerMinute && p <= PerMonth }

// periodRule is what a period must be, for every message that refuses one.
const periodRule = "must be minute, hour, day or month"

// ParsePeriod reads "minute", "hour", "day" or "month".
func ParsePeriod(s string) (Period, error) {
	for p := PerMinute; p <= PerMonth; p++ {
		if s == periodNames[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: period %q: %s", ErrInvalidLimit, s, periodRule)
}

// ParseQuota reads a quota written "N/PERIOD" ("100000/day"), the form
// the command line and the policy file use.
func ParseQuota(s string) (int64, Period, error) {
	n, per, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%w: quota %q: want COUNT/PERIOD, as 100000/day", ErrInvalidLimit, s)
	}
	var count int64
	if _, err := fmt.Sscan(n, &count); err != nil || fmt.Sprint(count) != n {
		return 0, 0, fmt.Errorf("%w: quota %q: count %q is not a whole number", ErrInvalidLimit, s, n)
	}
	p, err := ParsePeriod(per)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: quota %q: period %q: %s", ErrInvalidLimit, s, per, periodRule)
	}
	return count, p, nil
}

// FormatQuota is ParseQuota's form of a limit's quota; "" when it has none.
func (l Limit) FormatQuota() string {
	if l.Quota == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%s", l.Quota, l.Per)
}

// Window returns the calendar window of p, in UTC, that holds t.
func (p Period) Window(t time.Time) (start, end time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	switch p {
	case PerMinute:
		start = t.Truncate(time.Minute)
		return start, start.Add(time.Minute)
	case PerHour:
		start = t.Truncate(time.Hour)
		return start, start.Add(time.Hour)
	case PerDay:
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	default: // PerMonth; callers pass valid periods
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
}

// ExplainQuota is Explain for l's quota, naming it field: Quota and Per
// come together or not at all.
func (l Limit) ExplainQuota(field string) []string {
	switch {
	case l.Quota == 0 && l.Per == 0:
		return nil
	case l.Quota < 1 || l.Quota > MaxQuota:
		return []string{fmt.Sprintf("%s %d: must be in [1, %d] (MaxQuota)", field, l.Quota, int64(MaxQuota))}
	case !l.Per.valid():
		return []string{fmt.Sprintf("%s period %s: %s", field, l.Per, periodRule)}
	}
	return nil
}

// QuotaCount is the count of a key's quota window the leader committed
// ahead of use: no more than Count events of the window are granted.
type QuotaCount struct {
	Per    Period
	Window int64 // the window's start, Unix seconds, UTC
	Count  int64
}

// QuotaEntry commits the count of Key's window. Per 0 (and Window and
// Count 0) removes the key's count: its window has ended.
type QuotaEntry struct {
	Key string
	QuotaCount
}

// CommitQuotas moves the committed quota counts of many keys in one log
// entry: 1..MaxHorizonEntries entries with distinct keys. An entry for the
// key's stored window raises its count (never lowers it: a retried
// proposal or a late one may arrive after a larger one); one for a later
// window, or another period, replaces it; one for an earlier window of the
// same period is ignored.
type CommitQuotas struct {
	Entries []QuotaEntry
}

// Validate reports what is wrong with c (Per 0 is a removal).
func (c QuotaCount) Validate() error {
	if c.Per == 0 {
		if c.Window != 0 || c.Count != 0 {
			return fmt.Errorf("%w: a removal (Per 0) has Window 0 and Count 0, not %d and %d", ErrInvalidLimit, c.Window, c.Count)
		}
		return nil
	}
	if !c.Per.valid() {
		return fmt.Errorf("%w: Per %s: %s", ErrInvalidLimit, c.Per, periodRule)
	}
	if c.Count < 0 || c.Count > MaxQuota {
		return fmt.Errorf("%w: Count %d: must be in [0, %d] (MaxQuota)", ErrInvalidLimit, c.Count, int64(MaxQuota))
	}
	if c.Window < 0 || c.Window > maxWindow {
		return fmt.Errorf("%w: Window %d: must be in [0, %d]", ErrInvalidLimit, c.Window, int64(maxWindow))
	}
	if s, _ := c.Per.Window(time.Unix(c.Window, 0)); s.Unix() != c.Window {
		return fmt.Errorf("%w: Window %d: not the start of a %s (that is %d)", ErrInvalidLimit, c.Window, c.Per, s.Unix())
	}
	return nil
}

const maxWindow = 253402300799 // the latest window start: the year 9999

// applyQuota is CommitQuotas's rule for one entry (s.mu held).
func (s *State) applyQuota(e QuotaEntry) {
	old, had := s.quotas[e.Key]
	switch {
	case e.Per == 0:
		delete(s.quotas, e.Key)
	case !had || old.Per != e.Per || e.Window > old.Window:
		s.quotas[e.Key] = e.QuotaCount
	case e.Window == old.Window && e.Count > old.Count:
		s.quotas[e.Key] = e.QuotaCount
	}
}

// QuotaCount returns the committed count of key's latest window and
// whether the state holds one.
func (s *State) QuotaCount(key string) (QuotaCount, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.quotas[key]
	return c, ok
}

// QuotaCounts returns a copy of every committed quota count by key.
func (s *State) QuotaCounts() map[string]QuotaCount {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return copyMap(s.quotas)
}
