package fsm

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// codecVersion is byte 0 of every encoded command.
const codecVersion = 1

// Encode returns the version-1 encoding of c (see the package doc for the
// layout). It validates c first and never encodes an invalid command; the
// error then wraps ErrInvalidCommand and the field's sentinel.
func Encode(c Command) ([]byte, error) {
	c, err := checkCommand(c)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode: %w", err)
	}
	b := make([]byte, 0, encodedSize(c))
	b = append(b, codecVersion, c.commandType())
	switch c := c.(type) {
	case SetLimit:
		b = appendString(b, c.Key)
		b = appendFloat(b, c.Limit.Rate)
		b = binary.AppendVarint(b, int64(c.Limit.Burst))
		if c.commandType() == typeSetLimitQuota {
			b = appendQuota(b, c.Limit)
		}
	case DeleteLimit:
		b = appendString(b, c.Key)
	case ExtendHorizons:
		b = binary.AppendUvarint(b, uint64(len(c.Entries)))
		for _, e := range c.Entries {
			b = appendString(b, e.Key)
			b = binary.AppendVarint(b, int64(e.Ahead))
		}
	case UpsertMember:
		b = appendMember(b, c.Member)
	case RemoveMember:
		b = appendString(b, c.ID)
	case SetPause:
		b = appendString(b, c.Key)
		b = binary.AppendVarint(b, int64(c.For))
	case SetCap:
		b = appendString(b, c.Key)
		b = binary.AppendVarint(b, int64(c.Max))
	case DeleteCap:
		b = appendString(b, c.Key)
	case AcquireSlots:
		b = appendSlot(b, c.ID, Slot{Holder: c.Holder, Keys: c.Keys, TTL: c.TTL})
	case ReleaseSlots:
		b = binary.AppendUvarint(b, uint64(len(c.IDs)))
		for _, id := range c.IDs {
			b = appendString(b, id)
		}
	case CommitQuotas:
		b = binary.AppendUvarint(b, uint64(len(c.Entries)))
		for _, e := range c.Entries {
			b = appendString(b, e.Key)
			b = appendQuotaCount(b, e.QuotaCount)
		}
	}
	return b, nil
}

// encodedSize is an upper bound on the encoding of a valid command.
func encodedSize(c Command) int {
	const varint = binary.MaxVarintLen64
	switch c := c.(type) {
	case SetLimit:
		return 2 + varint + len(c.Key) + 8 + varint + 2 + varint
	case CommitQuotas:
		n := 2 + varint
		for _, e := range c.Entries {
			n += varint + len(e.Key) + 1 + 2*varint
		}
		return n
	case DeleteLimit:
		return 2 + varint + len(c.Key)
	case ExtendHorizons:
		n := 2 + varint
		for _, e := range c.Entries {
			n += varint + len(e.Key) + varint
		}
		return n
	case UpsertMember:
		return 2 + 2*varint + len(c.Member.ID) + len(c.Member.Addr) + 8
	case RemoveMember:
		return 2 + varint + len(c.ID)
	case SetPause:
		return 2 + varint + len(c.Key) + varint
	case SetCap:
		return 2 + varint + len(c.Key) + varint
	case DeleteCap:
		return 2 + varint + len(c.Key)
	case AcquireSlots:
		return 2 + slotSize(c.ID, Slot{Holder: c.Holder, Keys: c.Keys})
	case ReleaseSlots:
		n := 2 + varint
		for _, id := range c.IDs {
			n += varint + len(id)
		}
		return n
	}
	return 2
}

// appendQuota appends the fields a quota adds to a limit: the dry-run
// flag, Quota and Per.
func appendQuota(b []byte, l Limit) []byte {
	var dry byte
	if l.DryRun {
		dry = 1
	}
	b = append(b, dry)
	b = binary.AppendVarint(b, l.Quota)
	return append(b, byte(l.Per))
}

func appendQuotaCount(b []byte, c QuotaCount) []byte {
	b = append(b, byte(c.Per))
	b = binary.AppendVarint(b, c.Window)
	return binary.AppendVarint(b, c.Count)
}

// quota reads appendQuota's fields into l.
func (d *decoder) quota(l *Limit) {
	l.DryRun = d.bit("DryRun")
	l.Quota = d.varint("Quota")
	l.Per = Period(d.byte("Per"))
}

func (d *decoder) quotaCount() QuotaCount {
	per := Period(d.byte("Per"))
	return QuotaCount{Per: per, Window: d.varint("Window"), Count: d.varint("Count")}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func appendMember(b []byte, m Member) []byte {
	b = appendString(b, m.ID)
	b = appendString(b, m.Addr)
	return appendFloat(b, m.Fraction)
}

// appendSlot appends a slot as AcquireSlots and snapshots encode it.
func appendSlot(b []byte, id string, sl Slot) []byte {
	b = appendString(b, id)
	b = appendString(b, sl.Holder)
	b = binary.AppendUvarint(b, uint64(len(sl.Keys)))
	for _, k := range sl.Keys {
		b = appendString(b, k)
	}
	return binary.AppendVarint(b, int64(sl.TTL))
}

// slotSize is an upper bound on the encoding of a slot by appendSlot.
func slotSize(id string, sl Slot) int {
	const varint = binary.MaxVarintLen64
	n := 4*varint + len(id) + len(sl.Holder)
	for _, k := range sl.Keys {
		n += varint + len(k)
	}
	return n
}

// Decode parses one encoded command. It accepts exactly the bytes Encode
// produces for a valid command: it rejects an unknown version, truncation,
// trailing bytes, non-minimal varints, lengths and counts beyond their
// maximum or beyond the bytes that remain, and fields that fail the
// validation Encode applies. Errors wrap ErrInvalidCommand (and the field's
// sentinel when a field is invalid), or ErrUnknownCommand for a command type
// this version does not know. Decode never panics.
func Decode(b []byte) (Command, error) {
	c, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("fsm: decode: %w", err)
	}
	return c, nil
}

func decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, need at least 2 (version, type)", ErrInvalidCommand, len(b))
	}
	if b[0] != codecVersion {
		return nil, fmt.Errorf("%w: codec version %d: this build reads version %d", ErrInvalidCommand, b[0], codecVersion)
	}
	t := b[1]
	d := &decoder{b: b, off: 2}
	var c Command
	switch t {
	case typeSetLimit, typeSetLimitDryRun, typeSetLimitQuota:
		var v SetLimit
		v.Key = d.str("Key", MaxKeyLen)
		v.Limit.Rate = d.float("Rate")
		v.Limit.Burst = d.int("Burst")
		v.Limit.DryRun = t == typeSetLimitDryRun
		if t == typeSetLimitQuota {
			d.quota(&v.Limit)
			if d.err == nil && v.Limit.Quota == 0 {
				d.fail("Quota 0: a limit without a quota is type %d (not canonical)", typeSetLimit)
			}
		}
		c = v
	case typeCommitQuotas:
		n := d.count("Entries", MaxHorizonEntries, 5) // min entry: len, 1-byte key, per, window, count
		var v CommitQuotas
		if d.err == nil {
			v.Entries = make([]QuotaEntry, n)
			for i := range v.Entries {
				v.Entries[i].Key = d.str("Key", MaxKeyLen)
				v.Entries[i].QuotaCount = d.quotaCount()
			}
		}
		c = v
	case typeDeleteLimit:
		c = DeleteLimit{Key: d.str("Key", MaxKeyLen)}
	case typeExtendHorizons:
		n := d.count("Entries", MaxHorizonEntries, 3) // min entry: len, 1-byte key, ahead
		var v ExtendHorizons
		if d.err == nil {
			v.Entries = make([]HorizonEntry, n)
			for i := range v.Entries {
				v.Entries[i].Key = d.str("Key", MaxKeyLen)
				v.Entries[i].Ahead = time.Duration(d.varint("Ahead"))
			}
		}
		c = v
	case typeUpsertMember:
		c = UpsertMember{Member: d.member()}
	case typeRemoveMember:
		c = RemoveMember{ID: d.str("ID", MaxIDLen)}
	case typeSetPause:
		var v SetPause
		v.Key = d.str("Key", MaxKeyLen)
		v.For = time.Duration(d.varint("For"))
		c = v
	case typeSetCap:
		var v SetCap
		v.Key = d.str("Key", MaxKeyLen)
		v.Max = d.int("Max")
		c = v
	case typeDeleteCap:
		c = DeleteCap{Key: d.str("Key", MaxKeyLen)}
	case typeAcquireSlots:
		id, sl := d.slot()
		c = AcquireSlots{ID: id, Holder: sl.Holder, Keys: sl.Keys, TTL: sl.TTL}
	case typeReleaseSlots:
		n := d.count("IDs", MaxReleaseIDs, 2) // min id: len, 1 byte
		var v ReleaseSlots
		if d.err == nil {
			v.IDs = make([]string, n)
			for i := range v.IDs {
				v.IDs[i] = d.str("ID", MaxIDLen)
			}
		}
		c = v
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, t)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCommand, commandName(t), d.err)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes after offset %d", ErrInvalidCommand, commandName(t), len(b)-d.off, d.off)
	}
	if err := validate(c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCommand, commandName(t), err)
	}
	return c, nil
}

// decoder reads the primitive fields of commands and snapshots from a byte
// slice. The first error sticks: later reads return zero values, so a
// caller checks err once after a run of reads. Every length and count is
// bounded by the bytes that remain before anything is allocated.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

// uvarint reads a minimal unsigned varint.
func (d *decoder) uvarint(field string) uint64 { return d.uvarintOf(field, "") }

// uvarintOf reads a minimal unsigned varint that is the part of field named
// by part ("length", "count"), for error messages.
func (d *decoder) uvarintOf(field, part string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 || (n > 1 && d.b[d.off+n-1] == 0) {
		what := field
		if part != "" {
			what += " " + part
		}
		switch {
		case n == 0:
			d.fail("%s: truncated varint at offset %d", what, d.off)
		case n < 0:
			d.fail("%s: varint overflows 64 bits at offset %d", what, d.off)
		default:
			d.fail("%s: non-minimal varint at offset %d", what, d.off)
		}
		return 0
	}
	d.off += n
	return v
}

// varint reads a minimal zigzag varint.
func (d *decoder) varint(field string) int64 {
	u := d.uvarint(field)
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// int reads a zigzag varint that must fit an int.
func (d *decoder) int(field string) int {
	start := d.off
	v := d.varint(field)
	if int64(int(v)) != v {
		d.fail("%s %d at offset %d: does not fit an int", field, v, start)
		return 0
	}
	return int(v)
}

// bit reads a byte that must be 0 or 1.
func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 1 {
		d.fail("%s: truncated at offset %d", field, d.off)
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

func (d *decoder) bit(field string) bool {
	if d.err != nil {
		return false
	}
	if d.remaining() < 1 {
		d.fail("%s: truncated at offset %d", field, d.off)
		return false
	}
	v := d.b[d.off]
	if v > 1 {
		d.fail("%s %d at offset %d: must be 0 or 1", field, v, d.off)
		return false
	}
	d.off++
	return v == 1
}

func (d *decoder) float(field string) float64 {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 8 {
		d.fail("%s: need 8 bytes at offset %d, have %d", field, d.off, d.remaining())
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(d.b[d.off:]))
	d.off += 8
	return v
}

// str reads a length-prefixed string of at most maxLen bytes.
func (d *decoder) str(field string, maxLen int) string {
	start := d.off
	n := d.uvarintOf(field, "length")
	if d.err != nil {
		return ""
	}
	if n > uint64(maxLen) {
		d.fail("%s at offset %d: length %d exceeds the maximum %d", field, start, n, maxLen)
		return ""
	}
	if n > uint64(d.remaining()) {
		d.fail("%s at offset %d: length %d exceeds the %d bytes remaining", field, start, n, d.remaining())
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

// count reads an element count of at most maxCount, each element taking at
// least minSize bytes of what remains.
func (d *decoder) count(field string, maxCount, minSize int) int {
	start := d.off
	n := d.uvarintOf(field, "count")
	if d.err != nil {
		return 0
	}
	if n > uint64(maxCount) {
		d.fail("%s count %d at offset %d: exceeds the maximum %d", field, n, start, maxCount)
		return 0
	}
	if n > uint64(d.remaining()/minSize) {
		d.fail("%s count %d at offset %d: needs at least %d bytes each, only %d remain", field, n, start, minSize, d.remaining())
		return 0
	}
	return int(n)
}

func (d *decoder) member() Member {
	var m Member
	m.ID = d.str("ID", MaxIDLen)
	m.Addr = d.str("Addr", MaxAddrLen)
	m.Fraction = d.float("Fraction")
	return m
}

// slot reads a slot as appendSlot writes it.
func (d *decoder) slot() (string, Slot) {
	var sl Slot
	id := d.str("ID", MaxIDLen)
	sl.Holder = d.str("Holder", MaxIDLen)
	n := d.count("Keys", MaxSlotKeys, 2) // min key: len, 1 byte
	if d.err == nil {
		sl.Keys = make([]string, n)
		for i := range sl.Keys {
			sl.Keys[i] = d.str("Key", MaxKeyLen)
		}
	}
	sl.TTL = time.Duration(d.varint("TTL"))
	return id, sl
}
