package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
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
	want := withCRC([]byte("RPSN\x01\x00\x00\x00\x00"))
	if !bytes.Equal(got, want) {
		t.Fatalf("empty snapshot = %x, want %x", got, want)
	}
}

func TestSnapshot_Golden(t *testing.T) {
	s := New()
	mustApply(t, s, 3, SetLimit{Key: "b", Limit: lim(1, 2)})
	mustApply(t, s, 4, SetLimit{Key: "a", Limit: lim(0.5, 1)})
	mustApply(t, s, 5, horizons(HorizonEntry{"z", 1}))
	mustApply(t, s, 7, UpsertMember{Member: Member{ID: "n", Addr: "h:1", Fraction: 1}})
	body := []byte("RPSN\x01\x07" +
		"\x02" + "\x01a" + "\x3f\xe0\x00\x00\x00\x00\x00\x00" + "\x02" + "\x01b" + "\x3f\xf0\x00\x00\x00\x00\x00\x00" + "\x04" +
		"\x01" + "\x01z" + "\x02" +
		"\x01" + "\x01n" + "\x03h:1" + "\x3f\xf0\x00\x00\x00\x00\x00\x00")
	if got, want := snapshotBytes(t, s), withCRC(body); !bytes.Equal(got, want) {
		t.Fatalf("snapshot =\n %x\nwant\n %x", got, want)
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
	}
	idx2 := uint64(0)
	for i := len(keys) - 1; i >= 0; i-- { // b: backward, directly
		idx2++
		mustApply(t, b, idx2, SetLimit{Key: keys[i], Limit: lim(float64(i+1), 1+i)})
		mustApply(t, b, idx2+1, horizons(HorizonEntry{keys[i], time.Duration(i + 1)}))
		mustApply(t, b, idx2+2, UpsertMember{Member: Member{ID: keys[i], Addr: "h:1", Fraction: 1 / float64(i+1)}})
		idx2 += 2
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
	check("bad version", withCRC([]byte("RPSN\x02\x00\x00\x00\x00")), "version 2")
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
