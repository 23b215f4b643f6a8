package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// decodeSnapshot parses a whole snapshot into a new State (not yet shared,
// so its mutex is not needed).
func decodeSnapshot(data []byte) (*State, error) {
	const header = len(snapshotMagic) + 1
	const trailer = 4
	fail := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSnapshot, fmt.Errorf(format, args...))
	}
	if len(data) > maxSnapshotRead {
		return fail("larger than the maximum %d bytes (MaxSnapshotSize)", maxSnapshotRead)
	}
	if len(data) < header+3+trailer { // applied index and three counts (version 1): 1 byte each at least
		return fail("%d bytes: too short", len(data))
	}
	if string(data[:len(snapshotMagic)]) != snapshotMagic {
		return fail("magic %q: want %q", data[:len(snapshotMagic)], snapshotMagic)
	}
	version := data[len(snapshotMagic)]
	if version < snapshotV1 || version > snapshotV4 {
		return fail("version %d: this build reads versions %d to %d", version, snapshotV1, snapshotV4)
	}
	body := data[:len(data)-trailer]
	want := binary.BigEndian.Uint32(data[len(data)-trailer:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return fail("checksum mismatch: trailer says %#08x, content gives %#08x (corrupt or truncated)", want, got)
	}

	d := &decoder{b: body, off: header}
	st := New()
	st.applied = d.uvarint("applied index")

	// Minimum encoded sizes bound each count by the bytes that remain.
	const minLimit = 1 + 1 + 8 + 1  // key length, 1-byte key, rate, burst
	const minHorizon = 1 + 1 + 1    // key length, 1-byte key, ahead
	const minMember = 1 + 1 + 1 + 8 // id length, 1-byte id, addr length, fraction

	dryRuns, quotas := false, false
	var err error
	st.limits, err = keyedSection(d, "limit", minLimit, func() Limit {
		l := Limit{Rate: d.float("limit rate"), Burst: d.int("limit burst")}
		switch version {
		case snapshotV3:
			l.DryRun = d.bit("limit dry run")
		case snapshotV4:
			d.quota(&l)
		}
		return l
	}, func(l Limit) error {
		dryRuns, quotas = dryRuns || l.DryRun, quotas || l.Quota != 0
		return errors.Join(l.problems()...)
	})
	if err != nil {
		return fail("%w", err)
	}
	if version == snapshotV3 && d.err == nil && !dryRuns {
		return fail("version 3 without a limit in dry run (not canonical: that is version 2)")
	}
	if st.horizons, err = keyedSection(d, "horizon", minHorizon, func() time.Duration { return time.Duration(d.varint("horizon ahead")) }, validateStoredAhead); err != nil {
		return fail("%w", err)
	}

	n := d.count("members", math.MaxInt, minMember)
	if d.err == nil {
		st.members = make(map[string]Member, n)
	}
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		m := d.member()
		if d.err != nil {
			break
		}
		if err := errors.Join(m.problems()...); err != nil {
			return fail("member %d: %w", i, err)
		}
		if m.Fraction == 0 && math.Signbit(m.Fraction) {
			return fail("member %d id %s: Fraction is negative zero (not canonical)", i, quote(m.ID))
		}
		if i > 0 && m.ID <= prev {
			return fail("member %d id %s: not after the previous id %s (ids must be sorted and unique)", i, quote(m.ID), quote(prev))
		}
		st.members[m.ID], prev = m, m.ID
	}
	if version == snapshotV1 {
		return endSnapshot(d, st) // no pauses, caps or slots: New left them empty
	}

	// Version 2 adds three sections, bounded the same way.
	const minPause = 1 + 1 + 1        // key length, 1-byte key, for
	const minCap = 1 + 1 + 1          // key length, 1-byte key, max
	const minSlot = 2 + 2 + 1 + 2 + 1 // id, holder, key count, one key, ttl

	st.pauses, err = keyedSection(d, "pause", minPause, func() time.Duration { return time.Duration(d.varint("pause for")) }, func(p time.Duration) error {
		if p == 0 {
			return errors.New("For 0s: a cleared pause is not stored (not canonical)")
		}
		return validatePause(p)
	})
	if err != nil {
		return fail("%w", err)
	}
	if st.caps, err = keyedSection(d, "cap", minCap, func() int { return d.int("cap max") }, validateCap); err != nil {
		return fail("%w", err)
	}

	n = d.count("slots", math.MaxInt, minSlot)
	if d.err == nil {
		st.slots = make(map[string]Slot, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		id, sl := d.slot()
		if d.err != nil {
			break
		}
		if err := validateSlot(id, sl); err != nil {
			return fail("slot %d: %w", i, err)
		}
		if i > 0 && id <= prev {
			return fail("slot %d id %s: not after the previous id %s (ids must be sorted and unique)", i, quote(id), quote(prev))
		}
		st.slots[id], prev = sl, id
	}
	if version < snapshotV4 {
		return endSnapshot(d, st)
	}

	// Version 4 adds the quota counts.
	const minQuota = 1 + 1 + 1 + 1 + 1 // key length, 1-byte key, per, window, count
	st.quotas, err = keyedSection(d, "quota count", minQuota, d.quotaCount, func(c QuotaCount) error {
		if c.Per == 0 {
			return fmt.Errorf("%w: Per 0: a removed count is not stored", ErrInvalidLimit)
		}
		return c.Validate()
	})
	if err != nil {
		return fail("%w", err)
	}
	if d.err == nil && !quotas && len(st.quotas) == 0 {
		return fail("version 4 without a quota or a quota count (not canonical: that is version 2 or 3)")
	}
	return endSnapshot(d, st)
}

// keyedSection reads a section of entries sorted by unique key: a count,
// then per entry the key and what read reads, each checked by check. The
// first decoding error stays in d (the caller reports it at the end).
func keyedSection[V any](d *decoder, what string, minSize int, read func() V, check func(V) error) (map[string]V, error) {
	n := d.count(what+"s", math.MaxInt, minSize)
	if d.err != nil {
		return nil, nil
	}
	out, prev := make(map[string]V, n), ""
	for i := 0; i < n && d.err == nil; i++ {
		key := d.str(what+" key", MaxKeyLen)
		v := read()
		if d.err != nil {
			break
		}
		if err := validateKey(key); err != nil {
			return nil, fmt.Errorf("%s %d: %w", what, i, err)
		}
		if err := check(v); err != nil {
			return nil, fmt.Errorf("%s %d key %s: %w", what, i, quote(key), err)
		}
		if i > 0 && key <= prev {
			return nil, fmt.Errorf("%s %d key %s: not after the previous key %s (keys must be sorted and unique)", what, i, quote(key), quote(prev))
		}
		out[key], prev = v, key
	}
	return out, nil
}

// endSnapshot reports the first decoding error, or bytes left over after
// the last section of the version.
func endSnapshot(d *decoder, st *State) (*State, error) {
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSnapshot, d.err)
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("%w: %d unexpected bytes before the checksum at offset %d", ErrInvalidSnapshot, len(d.b)-d.off, d.off)
	}
	return st, nil
}
