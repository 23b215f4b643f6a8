package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPeriod_Window(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		per        Period
		t          string
		start, end string
	}{
		{PerMinute, "2026-12-06T20:41:59.999Z", "2026-12-06T20:41:00Z", "2026-12-06T20:42:00Z"},
		{PerHour, "2026-12-06T20:00:00Z", "2026-12-06T20:00:00Z", "2026-12-06T21:00:00Z"},
		{PerDay, "2026-12-06T23:59:59.9+05:00", "2026-12-06T00:00:00Z", "2026-12-07T00:00:00Z"}, // UTC, not the zone of t
		{PerDay, "2026-12-31T23:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{PerMonth, "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{PerMonth, "2026-12-06T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		s, e := c.per.Window(at(c.t))
		if !s.Equal(at(c.start)) || !e.Equal(at(c.end)) {
			t.Errorf("%s window of %s = [%s, %s), want [%s, %s)", c.per, c.t, s, e, c.start, c.end)
		}
	}
}

func TestParseQuota(t *testing.T) {
	n, per, err := ParseQuota("100000/day")
	if err != nil || n != 100000 || per != PerDay {
		t.Fatalf("ParseQuota(100000/day) = %d, %s, %v", n, per, err)
	}
	if got := (Limit{Rate: 1, Burst: 1, Quota: n, Per: per}).FormatQuota(); got != "100000/day" {
		t.Errorf("FormatQuota = %q", got)
	}
	for in, want := range map[string]string{
		"100000":       "want COUNT/PERIOD",
		"10/week":      `period "week"`,
		"1e5/day":      `count "1e5"`,
		" 5/day":       `count " 5"`,
		"5/Day":        `period "Day"`,
		"-1/hour":      "", // parses; Validate refuses it
		"99999999/min": `period "min"`,
	} {
		_, _, err := ParseQuota(in)
		if want == "" {
			if err != nil {
				t.Errorf("ParseQuota(%q): %v", in, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseQuota(%q) = %v, want ErrInvalidLimit naming %s", in, err, want)
		}
	}
	for _, l := range []Limit{
		{Rate: 1, Burst: 1, Quota: -1, Per: PerHour},
		{Rate: 1, Burst: 1, Quota: MaxQuota + 1, Per: PerHour},
		{Rate: 1, Burst: 1, Quota: 5},
		{Rate: 1, Burst: 1, Per: PerDay},
		{Rate: 1, Burst: 1, Quota: 5, Per: 9},
	} {
		if err := l.Validate(); !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "Quota") {
			t.Errorf("%+v: Validate = %v, want ErrInvalidLimit naming Quota", l, err)
		}
	}
}

// TestCommitQuotas_Rules: a count only grows within its window, a later
// window or another period replaces it, an earlier one is ignored, Per 0
// removes it.
func TestCommitQuotas_Rules(t *testing.T) {
	s := New()
	day := func(d int) int64 { return time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC).Unix() }
	idx := uint64(0)
	commit := func(c QuotaCount) {
		t.Helper()
		idx++
		mustApply(t, s, idx, CommitQuotas{Entries: []QuotaEntry{{Key: "k", QuotaCount: c}}})
	}
	expect := func(want QuotaCount, ok bool) {
		t.Helper()
		if got, had := s.QuotaCount("k"); got != want || had != ok {
			t.Fatalf("QuotaCount = %+v, %v; want %+v, %v", got, had, want, ok)
		}
	}
	commit(QuotaCount{PerDay, day(6), 10})
	commit(QuotaCount{PerDay, day(6), 4}) // a late, smaller proposal
	expect(QuotaCount{PerDay, day(6), 10}, true)
	commit(QuotaCount{PerDay, day(5), 50}) // an earlier window
	expect(QuotaCount{PerDay, day(6), 10}, true)
	commit(QuotaCount{PerDay, day(7), 3})
	expect(QuotaCount{PerDay, day(7), 3}, true)
	commit(QuotaCount{PerHour, day(7), 1}) // the limit's period changed
	expect(QuotaCount{PerHour, day(7), 1}, true)
	commit(QuotaCount{})
	expect(QuotaCount{}, false)

	for _, bad := range []QuotaCount{
		{PerDay, day(6) + 3600, 1}, // not a day's start
		{PerDay, day(6), -1},       // negative
		{PerDay, day(6), MaxQuota + 1},
		{0, day(6), 0}, // a removal names no window
		{7, day(6), 1},
	} {
		err := s.Apply(idx+1, CommitQuotas{Entries: []QuotaEntry{{Key: "k", QuotaCount: bad}}})
		if !errors.Is(err, ErrInvalidCommand) || !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: Apply = %v, want ErrInvalidCommand and ErrInvalidLimit", bad, err)
		}
	}
	if s.AppliedIndex() != idx {
		t.Fatalf("a refused entry moved the applied index")
	}
}

// TestSnapshot_GoldenQuota pins version 4: the quota of each limit and the
// section of committed counts; a state without either goes back to 2.
func TestSnapshot_GoldenQuota(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "a", Limit: Limit{Rate: 1, Burst: 1, Quota: 5, Per: PerHour}})
	mustApply(t, s, 2, CommitQuotas{Entries: []QuotaEntry{{Key: "a", QuotaCount: QuotaCount{PerHour, 3600, 2}}}})
	body := []byte("RPSN\x04\x02" +
		"\x01" + "\x01a" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" + "\x02" + "\x00\x0a\x02" +
		"\x00" + "\x00" + "\x00" + "\x00" + "\x00" +
		"\x01" + "\x01a" + "\x02" + "\xa0\x38" + "\x04")
	if got, want := snapshotBytes(t, s), withCRC(body); !bytes.Equal(got, want) {
		t.Fatalf("snapshot =\n %x\nwant\n %x", got, want)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(withCRC(body))); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, r, s)
	mustApply(t, s, 3, SetLimit{Key: "a", Limit: Limit{Rate: 1, Burst: 1}})
	mustApply(t, s, 4, CommitQuotas{Entries: []QuotaEntry{{Key: "a"}}})
	if v := snapshotBytes(t, s)[4]; v != 2 {
		t.Fatalf("no quota left: snapshot version %d, want 2", v)
	}
}

// TestSetLimitQuota_Encoding: a limit with a quota is a command type an
// older build refuses; one without is the bytes it always was.
func TestSetLimitQuota_Encoding(t *testing.T) {
	plain := mustEncode(t, SetLimit{Key: "k", Limit: Limit{Rate: 1, Burst: 1}})
	if plain[1] != typeSetLimit {
		t.Fatalf("a limit without a quota is type %d", plain[1])
	}
	b := mustEncode(t, SetLimit{Key: "k", Limit: Limit{Rate: 1, Burst: 1, DryRun: true, Quota: 7, Per: PerMonth}})
	if b[1] != typeSetLimitQuota {
		t.Fatalf("a limit with a quota is type %d", b[1])
	}
	c, err := Decode(b)
	if err != nil || c.(SetLimit).Limit != (Limit{Rate: 1, Burst: 1, DryRun: true, Quota: 7, Per: PerMonth}) {
		t.Fatalf("Decode = %+v, %v", c, err)
	}
	zero := append(bytes.Clone(b[:len(b)-2]), 0, byte(PerMonth)) // Quota 0 in the quota type
	if _, err := Decode(zero); !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), "not canonical") {
		t.Fatalf("Decode of a quota type with Quota 0 = %v", err)
	}
}
