package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// withCRC appends the CRC-32C trailer to body.
func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

func TestSnapshot_GoldenEmpty(t *testing.T) {
	got := snapshotBytes(t, New())
	want := withCRC([]byte("RPSN\x02\x00\x00\x00\x00\x00\x00\x00"))
	if !bytes.Equal(got, want) {
		t.Fatalf("empty snapshot = %x, want %x", got, want)
	}
}

// goldenV1 is a version-1 snapshot, as builds before pauses, caps and
// slots wrote it, of the state goldenV1State builds.
const goldenV1 = "RPSN\x01\x07" +
	"\x02" + "\x01a" + "\x3f\xe0\x00\x00\x00\x00\x00\x00" + "\x02" + "\x01b" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" + "\x04" +
	"\x01" + "\x01z" + "\x02" +
	"\x01" + "\x01n" + "\x03h:1" + "\x3f\xf0\x00\x00\x00\x00\x00\x00"

func goldenV1State(t *testing.T) *State {
	s := New()
	mustApply(t, s, 3, SetLimit{Key: "b", Limit: lim(1, 2)})
	mustApply(t, s, 4, SetLimit{Key: "a", Limit: lim(0.5, 1)})
	mustApply(t, s, 5, horizons(HorizonEntry{"z", 1}))
	mustApply(t, s, 7, UpsertMember{Member: Member{ID: "n", Addr: "h:1", Fraction: 1}})
	return s
}

func TestSnapshot_Golden(t *testing.T) {
	s := goldenV1State(t)
	mustApply(t, s, 8, SetPause{Key: "q", For: time.Second})
	mustApply(t, s, 9, SetPause{Key: "p", For: 1})
	mustApply(t, s, 10, SetCap{Key: "c", Max: 3})
	mustApply(t, s, 11, AcquireSlots{ID: "t", Holder: "n", Keys: []string{"c"}, TTL: 2})
	mustApply(t, s, 12, AcquireSlots{ID: "s", Holder: "m", Keys: []string{"b", "a"}, TTL: 1})
	second := string(binary.AppendVarint(nil, int64(time.Second)))
	body := []byte("RPSN\x02\x0c" +
		"\x02" + "\x01a" + "\x3f\xe0\x00\x00\x00\x00\x00\x00" + "\x02" + "\x01b" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" + "\x04" +
		"\x01" + "\x01z" + "\x02" +
		"\x01" + "\x01n" + "\x03h:1" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" +
		// pauses sorted by key: p 1ns (zigzag 2), q 1s
		"\x02" + "\x01p" + "\x02" + "\x01q" + second +
		// caps: c 3 (zigzag 6)
		"\x01" + "\x01c" + "\x06" +
		// slots sorted by id; keys in the order of the command
		"\x02" + "\x01s" + "\x01m" + "\x02" + "\x01b" + "\x01a" + "\x02" +
		/*     */ "\x01t" + "\x01n" + "\x01" + "\x01c" + "\x04")
	if got, want := snapshotBytes(t, s), withCRC(body); !bytes.Equal(got, want) {
		t.Fatalf("snapshot =\n %x\nwant\n %x", got, want)
	}
}

// TestSnapshot_GoldenDryRun: a limit in dry run makes the snapshot
// version 3, with a byte per limit; without one it stays version 2 (above),
// which builds without dry runs read.
func TestSnapshot_GoldenDryRun(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "a", Limit: Limit{Rate: 0.5, Burst: 1, DryRun: true}})
	mustApply(t, s, 2, SetLimit{Key: "b", Limit: Limit{Rate: 1, Burst: 2}})
	body := []byte("RPSN\x03\x02" +
		"\x02" + "\x01a" + "\x3f\xe0\x00\x00\x00\x00\x00\x00" + "\x02" + "\x01" +
		/*  */ "\x01b" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" + "\x04" + "\x00" +
		"\x00" + "\x00" + "\x00" + "\x00" + "\x00")
	if got, want := snapshotBytes(t, s), withCRC(body); !bytes.Equal(got, want) {
		t.Fatalf("snapshot =\n %x\nwant\n %x", got, want)
	}
	bad := bytes.Clone(body)
	bad[len("RPSN\x03\x02\x02\x01a")+8+1] = 2 // a's dry-run byte
	err := New().Restore(bytes.NewReader(withCRC(bad)))
	if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), "limit dry run 2") {
		t.Fatalf("a dry-run byte of 2: %v, want ErrInvalidSnapshot naming it", err)
	}
	mustApply(t, s, 3, SetLimit{Key: "a", Limit: Limit{Rate: 0.5, Burst: 1}})
	if v := snapshotBytes(t, s)[4]; v != 2 {
		t.Fatalf("no limit in dry run: snapshot version %d, want 2", v)
	}
}

// TestState_RestoreV1 checks that version-1 snapshots still restore, with
// no pauses, caps or slots, replacing any the state had.
func TestState_RestoreV1(t *testing.T) {
	want := goldenV1State(t)
	if got := snapshotBytesV1(t, want); !bytes.Equal(got, withCRC([]byte(goldenV1))) {
		t.Fatalf("snapshotBytesV1 = %x, want the golden %x", got, withCRC([]byte(goldenV1)))
	}
	s := New()
	mustApply(t, s, 1, SetPause{Key: "p", For: time.Second})
	mustApply(t, s, 2, SetCap{Key: "c", Max: 3})
	mustApply(t, s, 3, AcquireSlots{ID: "s", Holder: "n", Keys: []string{"c"}, TTL: 1})
	if err := s.Restore(bytes.NewReader(withCRC([]byte(goldenV1)))); err != nil {
		t.Fatalf("Restore of the golden version-1 snapshot: %v", err)
	}
	assertSameState(t, s, want)
	if len(s.Pauses())+len(s.Caps())+len(s.Slots()) != 0 {
		t.Errorf("after restoring version 1: Pauses %v, Caps %v, Slots %v; want none", s.Pauses(), s.Caps(), s.Slots())
	}
	// The restored state writes version 2 and goes on applying new commands.
	if got, want := snapshotBytes(t, s), upgradeV1(withCRC([]byte(goldenV1))); !bytes.Equal(got, want) {
		t.Errorf("snapshot after a version-1 restore = %x, want %x", got, want)
	}
	mustApply(t, s, 8, SetCap{Key: "a", Max: 1})

	// The property, on random states of the commands version 1 knew.
	rng := newRand(12)
	for range 100 {
		src := New()
		idx := uint64(0)
		for range rng.IntN(60) {
			c := randCommand(rng, []string{"a", "b", "c"})
			switch c := c.(type) {
			case SetPause, SetCap, DeleteCap, AcquireSlots, ReleaseSlots, CommitQuotas:
				continue
			case SetLimit:
				if c.Limit.DryRun || c.Limit.Quota != 0 {
					continue
				}
			}
			idx++
			mustApply(t, src, idx, c)
		}
		dst := randState(t, rng, 30)
		if err := dst.Restore(bytes.NewReader(snapshotBytesV1(t, src))); err != nil {
			t.Fatalf("Restore of a version-1 snapshot: %v", err)
		}
		assertSameState(t, dst, src)
	}
}

// TestState_SnapshotRestore is the property: Restore(Snapshot(s)) equals s,
// into an empty State and into one with other content (Restore replaces
// everything).
func TestState_SnapshotRestore(t *testing.T) {
	rng := newRand(6)
	for i := range 300 {
		src := randState(t, rng, 100)
		if i == 0 {
			src = New()
		}
		b := snapshotBytes(t, src)

		dst := New()
		if err := dst.Restore(bytes.NewReader(b)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		assertSameState(t, dst, src)

		other := randState(t, rng, 50)
		if err := other.Restore(bytes.NewReader(b)); err != nil {
			t.Fatalf("Restore over a non-empty state: %v", err)
		}
		assertSameState(t, other, src)

		// The restored state goes on applying like the original.
		c := randCommand(rng, nil)
		next := src.AppliedIndex() + 1
		mustApply(t, src, next, c)
		mustApply(t, dst, next, c)
		assertSameState(t, dst, src)
	}
}

// TestState_SnapshotBytesEqual builds equal states along different paths
// (so their maps have different histories) and checks the bytes match.
func TestState_SnapshotBytesEqual(t *testing.T) {
	rng := newRand(7)
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", randName(rng, 20), i)
	}
	a, b := New(), New()
	idx := uint64(0)
	for i := range keys { // a: forward, with churn
		idx++
		mustApply(t, a, idx, SetLimit{Key: keys[i], Limit: lim(9, 9)})
		idx++
		mustApply(t, a, idx, SetLimit{Key: keys[i], Limit: lim(float64(i+1), 1+i)})
		idx++
		mustApply(t, a, idx, horizons(HorizonEntry{keys[i], time.Duration(i + 1)}))
		idx++
		mustApply(t, a, idx, UpsertMember{Member: Member{ID: keys[i], Addr: "h:1", Fraction: 1 / float64(i+1)}})
		idx++
		mustApply(t, a, idx, SetPause{Key: keys[i], For: time.Hour})
		idx++
		mustApply(t, a, idx, SetPause{Key: keys[i], For: time.Duration(i + 1)})
		idx++
		mustApply(t, a, idx, SetCap{Key: keys[i], Max: 1 + i})
		idx++
		mustApply(t, a, idx, AcquireSlots{ID: keys[i], Holder: "h", Keys: []string{keys[i], "x"}, TTL: time.Duration(i + 1)})
		if i%2 == 0 { // churn: a slot acquired and released again
			idx++
			mustApply(t, a, idx, AcquireSlots{ID: "tmp-" + keys[i], Holder: "h", Keys: []string{"x"}, TTL: 1})
			idx++
			mustApply(t, a, idx, ReleaseSlots{IDs: []string{"tmp-" + keys[i]}})
		}
	}
	idx2 := uint64(0)
	for i := len(keys) - 1; i >= 0; i-- { // b: backward, directly
		idx2++
		mustApply(t, b, idx2, SetLimit{Key: keys[i], Limit: lim(float64(i+1), 1+i)})
		mustApply(t, b, idx2+1, horizons(HorizonEntry{keys[i], time.Duration(i + 1)}))
		mustApply(t, b, idx2+2, UpsertMember{Member: Member{ID: keys[i], Addr: "h:1", Fraction: 1 / float64(i+1)}})
		mustApply(t, b, idx2+3, SetPause{Key: keys[i], For: time.Duration(i + 1)})
		mustApply(t, b, idx2+4, SetCap{Key: keys[i], Max: 1 + i})
		mustApply(t, b, idx2+5, AcquireSlots{ID: keys[i], Holder: "h", Keys: []string{keys[i], "x"}, TTL: time.Duration(i + 1)})
		idx2 += 5
	}
	if idx2 > idx {
		t.Fatalf("b's index %d passed a's %d; the final step below must move both to the same index", idx2, idx)
	}
	idx++
	mustApply(t, a, idx, DeleteLimit{Key: "absent"})
	mustApply(t, b, idx, RemoveMember{ID: "absent"})
	assertSameState(t, a, b)
	// And the same state snapshotted twice gives the same bytes.
	if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, a)) {
		t.Error("two snapshots of one state differ")
	}
}

// TestState_RestoreCorrupt flips every byte and cuts at every length of a
// real snapshot: each must give ErrInvalidSnapshot and leave the state alone.
func TestState_RestoreCorrupt(t *testing.T) {
	rng := newRand(8)
	src := randState(t, rng, 40)
	good := snapshotBytes(t, src)
	if len(good) < 50 {
		t.Fatalf("snapshot too small for a useful test: %d bytes", len(good))
	}
	dst := randState(t, rng, 20)
	before := snapshotBytes(t, dst)
	check := func(what string, b []byte, msgs ...string) {
		t.Helper()
		err := dst.Restore(bytes.NewReader(b))
		checkErr(t, err, []error{ErrInvalidSnapshot}, append(msgs, "fsm: restore: invalid snapshot")...)
		if err != nil && t.Failed() {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(snapshotBytes(t, dst), before) {
			t.Fatalf("%s: failed Restore changed the state", what)
		}
	}
	for i := range good {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(good)
			b[i] ^= mask
			check("flip", b)
		}
	}
	for n := range len(good) {
		check("truncate", good[:n])
	}
	check("trailing byte", append(bytes.Clone(good), 0), "checksum mismatch")
	check("empty", nil, "too short")
	check("bad magic", withCRC([]byte("RPSX\x01\x00\x00\x00\x00")), `magic "RPSX"`)
	check("version 0", withCRC([]byte("RPSN\x00\x00\x00\x00\x00\x00\x00\x00")), "version 0: this build reads versions 1 to 4")
	check("version 5", withCRC([]byte("RPSN\x05\x00\x00\x00\x00\x00\x00\x00")), "version 5")
	check("version 4 without a quota", withCRC([]byte("RPSN\x04\x00\x00\x00\x00\x00\x00\x00\x00")), "version 4 without a quota")
	check("version 3 without a dry run", withCRC([]byte("RPSN\x03\x00\x00\x00\x00\x00\x00\x00")), "version 3 without a limit in dry run")
	check("version 2 without its sections", withCRC([]byte("RPSN\x02\x00\x00\x00\x00")), "pauses count: truncated")
	check("version 1 with empty version-2 sections", withCRC([]byte("RPSN\x01\x00\x00\x00\x00\x00\x00\x00")), "3 unexpected bytes")
	check("bit flip in body", func() []byte { b := bytes.Clone(good); b[10] ^= 4; return b }(), "checksum mismatch")
}

// TestState_RestoreInvalidContent feeds snapshots whose checksum is right
// but whose content is not valid or not canonical.
func TestState_RestoreInvalidContent(t *testing.T) {
	f64 := func(f float64) string { return string(binary.BigEndian.AppendUint64(nil, math.Float64bits(f))) }
	one := f64(1)
	tests := []struct {
		name string
		body string // after "RPSN\x01"
		want []error
		msgs []string
	}{
		{"unsorted limits", "\x01\x02\x01b" + one + "\x02\x01a" + one + "\x02\x00\x00", nil, []string{`limit 1 key "a": not after the previous key "b"`}},
		{"duplicate limits", "\x01\x02\x01a" + one + "\x02\x01a" + one + "\x02\x00\x00", nil, []string{"sorted and unique"}},
		{"unsorted horizons", "\x01\x00\x02\x01b\x02\x01a\x02\x00", nil, []string{`horizon 1 key "a"`}},
		{"unsorted members", "\x01\x00\x00\x02\x01b\x03h:1" + one + "\x01a\x03h:1" + one, nil, []string{`member 1 id "a"`}},
		{"invalid limit", "\x01\x01\x01a" + f64(math.Inf(1)) + "\x02\x00\x00", []error{ErrInvalidLimit}, []string{"limit 0", "Rate +Inf"}},
		{"invalid key", "\x01\x01\x02a " + one + "\x02\x00\x00", []error{ErrInvalidKey}, []string{"whitespace"}},
		{"zero ahead", "\x01\x00\x01\x01a\x00\x00", nil, []string{"horizon 0", "Ahead 0s"}},
		{"invalid member", "\x01\x00\x00\x01\x01a\x02h:" + one, []error{ErrInvalidMember}, []string{"member 0", "Addr"}},
		{"negative zero fraction", "\x01\x00\x00\x01\x01a\x03h:1" + f64(math.Copysign(0, -1)), nil, []string{"negative zero"}},
		{"non-minimal varint", "\x81\x00\x00\x00\x00", nil, []string{"non-minimal varint"}},
		{"huge count", "\x01\xff\xff\xff\xff\x0f\x00\x00", nil, []string{"limits count 4294967295", "remain"}},
		{"extra bytes", "\x01\x00\x00\x00\x00", nil, []string{"1 unexpected bytes before the checksum"}},
		{"missing members count", "\x01\x00\x00", nil, []string{"members count: truncated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			mustApply(t, s, 1, SetLimit{Key: "keep", Limit: lim(1, 1)})
			before := snapshotBytes(t, s)
			err := s.Restore(bytes.NewReader(withCRC([]byte("RPSN\x01" + tt.body))))
			checkErr(t, err, append([]error{ErrInvalidSnapshot}, tt.want...), tt.msgs...)
			if !bytes.Equal(snapshotBytes(t, s), before) {
				t.Error("failed Restore changed the state")
			}
		})
	}
}

// TestState_RestoreInvalidContentV2 does the same for the sections version 2
// adds.
func TestState_RestoreInvalidContentV2(t *testing.T) {
	const empty = "\x01\x00\x00\x00" // applied 1; no limits, horizons or members
	tests := []struct {
		name string
		body string // after "RPSN\x02" + empty
		want []error
		msgs []string
	}{
		{"unsorted pauses", "\x02\x01b\x02\x01a\x02\x00\x00", nil, []string{`pause 1 key "a": not after the previous key "b"`}},
		{"duplicate pauses", "\x02\x01a\x02\x01a\x02\x00\x00", nil, []string{"sorted and unique"}},
		{"zero pause", "\x01\x01a\x00\x00\x00", nil, []string{`pause 0 key "a": For 0s: a cleared pause is not stored`}},
		{"negative pause", "\x01\x01a\x01\x00\x00", nil, []string{"pause 0", "For -1ns"}},
		{"invalid pause key", "\x01\x00\x02\x00\x00", []error{ErrInvalidKey}, []string{"pause 0", "must not be empty"}},
		{"truncated pause", "\x01\x02aa", nil, []string{"pause for: truncated varint"}},
		{"invalid cap key", "\x00\x01\x00\x02\x00", []error{ErrInvalidKey}, []string{"cap 0", "must not be empty"}},
		{"truncated cap", "\x00\x01\x02aa", nil, []string{"cap max: truncated varint"}},
		{"unsorted caps", "\x00\x02\x01b\x02\x01a\x02\x00", nil, []string{`cap 1 key "a": not after the previous key "b"`}},
		{"zero cap", "\x00\x01\x01a\x00\x00", nil, []string{`cap 0 key "a": Max 0: must be >= 1`}},
		{"cap above max", "\x00\x01\x01a" + string(binary.AppendVarint(nil, MaxCap+1)) + "\x00", nil, []string{"MaxCap"}},
		{"huge cap", "\x00\x01\x01a" + string(binary.AppendVarint(nil, math.MaxInt64)) + "\x00", nil, []string{"cap 0 key \"a\": Max"}},
		{"unsorted slots", "\x00\x00\x02\x01t\x01n\x01\x01a\x02\x01s\x01n\x01\x01a\x02", nil, []string{`slot 1 id "s": not after the previous id "t"`}},
		{"duplicate slots", "\x00\x00\x02\x01s\x01n\x01\x01a\x02\x01s\x01n\x01\x01a\x02", nil, []string{"sorted and unique"}},
		{"slot without keys", "\x00\x00\x01\x03sss\x01n\x00\x02", nil, []string{"slot 0", "0 keys"}},
		{"slot duplicate keys", "\x00\x00\x01\x01s\x01n\x02\x01a\x01a\x02", nil, []string{"slot 0", `keys 0 and 1: duplicate key "a"`}},
		{"slot key count above max", "\x00\x00\x01\x01s\x01n\x11" + strings.Repeat("\x01a", 17) + "\x02", nil, []string{"Keys count 17", "maximum 16"}},
		{"slot zero ttl", "\x00\x00\x01\x01s\x01n\x01\x01a\x00", nil, []string{"slot 0", "TTL 0s"}},
		{"slot bad holder", "\x00\x00\x01\x01s\x02n \x01\x01a\x02", []error{ErrInvalidID}, []string{"slot 0", "Holder:", "whitespace"}},
		{"slot empty id", "\x00\x00\x01\x00\x02nn\x01\x01a\x02", []error{ErrInvalidID}, []string{"slot 0", "ID:", "must not be empty"}},
		{"huge slot count", "\x00\x00\xff\xff\xff\xff\x0f", nil, []string{"slots count 4294967295", "remain"}},
		{"huge pause count", "\xff\xff\xff\xff\x0f\x00\x00", nil, []string{"pauses count 4294967295", "remain"}},
		{"huge cap count", "\x00\xff\xff\xff\xff\x0f\x00", nil, []string{"caps count 4294967295", "remain"}},
		{"slot shorter than any valid one", "\x00\x00\x01\x01s\x01n\x00\x02", nil, []string{"slots count 1", "needs at least 8 bytes each, only 6 remain"}},
		{"truncated slot", "\x00\x00\x01\x03sss\x01n\x01\x01a", nil, []string{"TTL: truncated"}},
		{"missing slots count", "\x00\x00", nil, []string{"slots count: truncated"}},
		{"extra bytes", "\x00\x00\x00\x00", nil, []string{"1 unexpected bytes before the checksum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			mustApply(t, s, 1, SetPause{Key: "keep", For: time.Second})
			before := snapshotBytes(t, s)
			err := s.Restore(bytes.NewReader(withCRC([]byte("RPSN\x02" + empty + tt.body))))
			checkErr(t, err, append([]error{ErrInvalidSnapshot}, tt.want...), tt.msgs...)
			if !bytes.Equal(snapshotBytes(t, s), before) {
				t.Error("failed Restore changed the state")
			}
		})
	}
	// And the same prefix with valid sections restores.
	ok := "\x01\x01a\x02" + "\x01\x01a\x02" + "\x01\x01s\x01n\x01\x01a\x02"
	s := New()
	if err := s.Restore(bytes.NewReader(withCRC([]byte("RPSN\x02" + empty + ok)))); err != nil {
		t.Fatalf("Restore of a valid version-2 snapshot: %v", err)
	}
	if d, _ := s.Pause("a"); d != 1 {
		t.Errorf("Pause(a) = %v, want 1ns", d)
	}
	if n, _ := s.Cap("a"); n != 1 {
		t.Errorf("Cap(a) = %v, want 1", n)
	}
	if sl, _ := s.Slot("s"); !reflect.DeepEqual(sl, Slot{Holder: "n", Keys: []string{"a"}, TTL: 1}) {
		t.Errorf("Slot(s) = %v", sl)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestState_RestoreReadError(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "keep", Limit: lim(1, 1)})
	before := snapshotBytes(t, s)
	boom := errors.New("disk on fire")
	err := s.Restore(io.MultiReader(bytes.NewReader([]byte("RPSN\x01")), errReader{boom}))
	checkErr(t, err, []error{boom}, "fsm: restore: read snapshot")
	if errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("read error %q reported as ErrInvalidSnapshot", err)
	}
	if !bytes.Equal(snapshotBytes(t, s), before) {
		t.Error("failed Restore changed the state")
	}
}

func TestState_RestoreTooLarge(t *testing.T) {
	defer func(old int) { maxSnapshotRead = old }(maxSnapshotRead)
	s := randState(t, newRand(9), 50)
	good := snapshotBytes(t, s)
	maxSnapshotRead = len(good)
	if err := New().Restore(bytes.NewReader(good)); err != nil {
		t.Fatalf("Restore of a snapshot of exactly the maximum size: %v", err)
	}
	maxSnapshotRead = len(good) - 1
	// An endless reader must not be read past the limit.
	r := io.MultiReader(bytes.NewReader(good), endless{})
	checkErr(t, New().Restore(r), []error{ErrInvalidSnapshot}, "larger than the maximum")
}

type endless struct{}

func (endless) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestSnapshot_Persist(t *testing.T) {
	s := randState(t, newRand(10), 200)
	want := snapshotBytes(t, s)
	snap := s.Snapshot()
	if snap.AppliedIndex() != s.AppliedIndex() {
		t.Errorf("Snapshot.AppliedIndex = %d, want %d", snap.AppliedIndex(), s.AppliedIndex())
	}
	sink := &fakeSink{failWrites: -1}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if sink.closed != 1 || sink.cancelled != 0 {
		t.Errorf("after Persist: Close called %d times, Cancel %d; want 1, 0", sink.closed, sink.cancelled)
	}
	if !bytes.Equal(sink.buf.Bytes(), want) {
		t.Error("Persist wrote different bytes from WriteTo")
	}
	snap.Release()
	snap.Release() // no-op, twice is fine
}

// TestSnapshot_PersistLarge covers a snapshot bigger than one write chunk.
func TestSnapshot_PersistLarge(t *testing.T) {
	s := New()
	es := make([]HorizonEntry, 0, MaxHorizonEntries)
	for i := range 20000 {
		es = append(es, HorizonEntry{Key: "key-" + strings.Repeat("x", i%40) + string(rune('a'+i%26)) + time.Duration(i).String(), Ahead: time.Duration(i + 1)})
	}
	mustApply(t, s, 1, ExtendHorizons{Entries: es})
	sink := &fakeSink{failWrites: -1}
	if err := s.Snapshot().Persist(sink); err != nil {
		t.Fatal(err)
	}
	if sink.buf.Len() < 3*snapshotChunk {
		t.Fatalf("snapshot only %d bytes; want several chunks", sink.buf.Len())
	}
	got := New()
	if err := got.Restore(&sink.buf); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, got, s)

	for _, fail := range []int{0, 1, 2} {
		sink := &fakeSink{failWrites: fail, writeErr: errors.New("disk full")}
		err := s.Snapshot().Persist(sink)
		checkErr(t, err, []error{sink.writeErr}, "fsm: persist snapshot", "disk full")
		if sink.cancelled != 1 || sink.closed != 0 {
			t.Errorf("failing write %d: Cancel called %d times, Close %d; want 1, 0", fail, sink.cancelled, sink.closed)
		}
	}
}

func TestSnapshot_PersistFailingSink(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "a", Limit: lim(1, 1)})
	sink := &fakeSink{failWrites: 0, writeErr: errors.New("disk full")}
	err := s.Snapshot().Persist(sink)
	checkErr(t, err, []error{sink.writeErr}, "fsm: persist snapshot: disk full")
	if sink.cancelled != 1 || sink.closed != 0 {
		t.Errorf("Cancel called %d times, Close %d; want 1, 0", sink.cancelled, sink.closed)
	}
}

// TestSnapshot_IsolatedFromState checks that a Snapshot does not change when
// the State does.
func TestSnapshot_IsolatedFromState(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "a", Limit: lim(1, 1)})
	snap := s.Snapshot()
	var want bytes.Buffer
	if _, err := snap.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, 2, SetLimit{Key: "b", Limit: lim(2, 2)})
	var got bytes.Buffer
	if _, err := snap.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Error("snapshot changed after a later Apply")
	}
}
