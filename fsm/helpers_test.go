package fsm

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newRand returns a deterministic generator for property tests.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5eed))
}

// keyRunes are the pieces random keys are built from: ASCII, separators
// real keys use, and multi-byte runes of 2, 3 and 4 bytes.
var keyRunes = []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:/-_.@+=éß日本🚀")

// randName returns a valid key or id of at most maxLen bytes.
func randName(rng *rand.Rand, maxLen int) string {
	var n int
	switch rng.IntN(10) {
	case 0:
		n = maxLen // as long as fits
	case 1:
		n = 1
	default:
		n = 1 + rng.IntN(24)
	}
	var b strings.Builder
	for {
		r := keyRunes[rng.IntN(len(keyRunes))]
		if b.Len()+len(string(r)) > n {
			break
		}
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "k"
	}
	return b.String()
}

func randKey(rng *rand.Rand) string { return randName(rng, MaxKeyLen) }
func randID(rng *rand.Rand) string  { return randName(rng, MaxIDLen) }

// randRate returns a valid rate across the whole range, edges included.
func randRate(rng *rand.Rand) float64 {
	switch rng.IntN(8) {
	case 0:
		return MaxRate
	case 1:
		return math.SmallestNonzeroFloat64
	case 2:
		return float64(1 + rng.IntN(1000))
	case 3:
		return 1 / float64(1+rng.IntN(100))
	default:
		r := math.Pow(10, -12+21*rng.Float64()) // 1e-12 .. 1e9
		return min(r, MaxRate)
	}
}

func randLimit(rng *rand.Rand) Limit {
	b := 1 + rng.IntN(MaxBurst)
	if rng.IntN(3) == 0 {
		b = 1 + rng.IntN(10)
	}
	l := Limit{Rate: randRate(rng), Burst: b, DryRun: rng.IntN(8) == 0}
	if rng.IntN(8) == 0 {
		l.Quota, l.Per = 1+rng.Int64N(MaxQuota), Period(1+rng.IntN(4))
	}
	return l
}

// randQuotaCount returns a valid committed count, a removal (Per 0) one
// time in eight.
func randQuotaCount(rng *rand.Rand) QuotaCount {
	if rng.IntN(8) == 0 {
		return QuotaCount{}
	}
	per := Period(1 + rng.IntN(4))
	start, _ := per.Window(time.Unix(rng.Int64N(maxWindow), 0))
	return QuotaCount{Per: per, Window: start.Unix(), Count: rng.Int64N(MaxQuota + 1)}
}

func randAhead(rng *rand.Rand) time.Duration {
	if rng.IntN(10) == 0 {
		return MaxHorizonAhead
	}
	return time.Duration(1 + rng.Int64N(int64(MaxHorizonAhead)))
}

func randMember(rng *rand.Rand) Member {
	hosts := []string{"10.0.0.1", "node-3.example.com", "[::1]", "[fe80::1%eth0]", "localhost"}
	f := rng.Float64()
	switch rng.IntN(4) {
	case 0:
		f = 0
	case 1:
		f = 1
	}
	return Member{
		ID:       randID(rng),
		Addr:     hosts[rng.IntN(len(hosts))] + ":" + strconv.Itoa(1+rng.IntN(65535)),
		Fraction: f,
	}
}

// randCommand returns a random valid command; keys come from pool when it
// is not empty, so that commands collide on keys.
func randCommand(rng *rand.Rand, pool []string) Command {
	key := func() string {
		if len(pool) > 0 && rng.IntN(4) != 0 {
			return pool[rng.IntN(len(pool))]
		}
		return randKey(rng)
	}
	switch rng.IntN(12) {
	case 0, 1:
		return SetLimit{Key: key(), Limit: randLimit(rng)}
	case 2:
		return DeleteLimit{Key: key()}
	case 3:
		n := 1 + rng.IntN(20)
		if rng.IntN(50) == 0 {
			n = 1 + rng.IntN(2000)
		}
		seen := map[string]bool{}
		var es []HorizonEntry
		for len(es) < n {
			k := key()
			if seen[k] {
				k = randKey(rng)
				if seen[k] {
					continue
				}
			}
			seen[k] = true
			es = append(es, HorizonEntry{Key: k, Ahead: randAhead(rng)})
		}
		return ExtendHorizons{Entries: es}
	case 4:
		return UpsertMember{Member: randMember(rng)}
	case 5:
		return RemoveMember{ID: randID(rng)}
	case 6:
		return SetPause{Key: key(), For: randPause(rng)}
	case 7:
		return SetCap{Key: key(), Max: randCap(rng)}
	case 8:
		return DeleteCap{Key: key()}
	case 9:
		n := 1 + rng.IntN(MaxSlotKeys)
		keys := make([]string, 0, n)
		for len(keys) < n {
			if k := key(); !slices.Contains(keys, k) {
				keys = append(keys, k)
			} else if k := randKey(rng); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return AcquireSlots{ID: randSlotID(rng), Holder: randID(rng), Keys: keys, TTL: randTTL(rng)}
	case 10:
		n := 1 + rng.IntN(6)
		var es []QuotaEntry
		for len(es) < n {
			if k := key(); !slices.ContainsFunc(es, func(e QuotaEntry) bool { return e.Key == k }) {
				es = append(es, QuotaEntry{Key: k, QuotaCount: randQuotaCount(rng)})
			}
		}
		return CommitQuotas{Entries: es}
	default:
		n := 1 + rng.IntN(8)
		if rng.IntN(50) == 0 {
			n = 1 + rng.IntN(MaxReleaseIDs)
		}
		ids := make([]string, 0, n)
		seen := map[string]bool{}
		for len(ids) < n {
			id := randSlotID(rng)
			if seen[id] {
				id = randID(rng) + "-" + strconv.Itoa(len(ids))
				if seen[id] || len(id) > MaxIDLen {
					continue
				}
			}
			seen[id] = true
			ids = append(ids, id)
		}
		return ReleaseSlots{IDs: ids}
	}
}

// randSlotID returns a slot id, most often one of a few, so that
// acquisitions and releases collide.
func randSlotID(rng *rand.Rand) string {
	if rng.IntN(4) != 0 {
		return "slot-" + strconv.Itoa(rng.IntN(8))
	}
	return randID(rng)
}

// randPause returns a valid SetPause.For, 0 (clear) included.
func randPause(rng *rand.Rand) time.Duration {
	switch rng.IntN(10) {
	case 0, 1:
		return 0
	case 2:
		return MaxPause
	}
	return time.Duration(1 + rng.Int64N(int64(MaxPause)))
}

func randCap(rng *rand.Rand) int {
	switch rng.IntN(10) {
	case 0:
		return MaxCap
	case 1:
		return 1
	}
	return 1 + rng.IntN(100)
}

func randTTL(rng *rand.Rand) time.Duration {
	if rng.IntN(10) == 0 {
		return MaxSlotTTL
	}
	return time.Duration(1 + rng.Int64N(int64(MaxSlotTTL)))
}

// randState applies up to n random commands to a new State.
func randState(t testing.TB, rng *rand.Rand, n int) *State {
	t.Helper()
	pool := make([]string, 1+rng.IntN(30))
	for i := range pool {
		pool[i] = randKey(rng)
	}
	s := New()
	idx := uint64(0)
	for range rng.IntN(n + 1) {
		idx += 1 + uint64(rng.IntN(3))
		mustApply(t, s, idx, randCommand(rng, pool))
	}
	return s
}

func mustApply(t testing.TB, s *State, index uint64, c Command) {
	t.Helper()
	if err := s.Apply(index, c); err != nil {
		t.Fatalf("Apply(%d, %#v): %v", index, c, err)
	}
}

func mustEncode(t testing.TB, c Command) []byte {
	t.Helper()
	b, err := Encode(c)
	if err != nil {
		t.Fatalf("Encode(%#v): %v", c, err)
	}
	return b
}

// snapshotBytesV1 returns the version-1 snapshot of s, which must hold no
// pauses, caps or slots: version 2 is version 1 with those three sections
// appended, so this drops their three empty counts and fixes the header
// and checksum.
func snapshotBytesV1(t testing.TB, s *State) []byte {
	t.Helper()
	b := snapshotBytes(t, s)
	body := b[:len(b)-4]
	if !bytes.HasSuffix(body, []byte{0, 0, 0}) || len(s.Pauses())+len(s.Caps())+len(s.Slots()) != 0 {
		t.Fatalf("snapshotBytesV1 of a state with pauses, caps or slots")
	}
	body = bytes.Clone(body[:len(body)-3])
	body[len(snapshotMagic)] = 1
	return withCRC(body)
}

// upgradeV1 returns the version-2 snapshot of the state that the version-1
// snapshot b holds.
func upgradeV1(b []byte) []byte {
	body := append(bytes.Clone(b[:len(b)-4]), 0, 0, 0)
	body[len(snapshotMagic)] = 2
	return withCRC(body)
}

// snapshotBytes returns the snapshot encoding of s.
func snapshotBytes(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.Snapshot().WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// assertSameState fails unless a and b hold equal states and encode to the
// same snapshot bytes.
func assertSameState(t testing.TB, got, want *State) {
	t.Helper()
	if g, w := got.AppliedIndex(), want.AppliedIndex(); g != w {
		t.Errorf("AppliedIndex = %d, want %d", g, w)
	}
	if g, w := got.Limits(), want.Limits(); !reflect.DeepEqual(g, w) {
		t.Errorf("Limits = %v, want %v", g, w)
	}
	if g, w := got.Horizons(), want.Horizons(); !reflect.DeepEqual(g, w) {
		t.Errorf("Horizons = %v, want %v", g, w)
	}
	if g, w := got.Members(), want.Members(); !reflect.DeepEqual(g, w) {
		t.Errorf("Members = %v, want %v", g, w)
	}
	if g, w := got.Pauses(), want.Pauses(); !reflect.DeepEqual(g, w) {
		t.Errorf("Pauses = %v, want %v", g, w)
	}
	if g, w := got.Caps(), want.Caps(); !reflect.DeepEqual(g, w) {
		t.Errorf("Caps = %v, want %v", g, w)
	}
	if g, w := got.Slots(), want.Slots(); !reflect.DeepEqual(g, w) {
		t.Errorf("Slots = %v, want %v", g, w)
	}
	if g, w := snapshotBytes(t, got), snapshotBytes(t, want); !bytes.Equal(g, w) {
		t.Errorf("snapshot bytes differ:\n got %x\nwant %x", g, w)
	}
}

// checkErr fails unless err wraps every sentinel in want and its message
// contains every string in msgs.
func checkErr(t testing.TB, err error, want []error, msgs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an error wrapping %v", want)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("err = %q, does not wrap %q", err, w)
		}
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("err = %q, does not mention %q", err, m)
		}
	}
}

// fakeSink is a raft.SnapshotSink in memory that can fail its writes.
type fakeSink struct {
	buf        bytes.Buffer
	failWrites int   // writes that succeed before the next one fails; -1: never fail
	writeErr   error // the error a failing write returns
	closed     int
	cancelled  int
}

func (s *fakeSink) ID() string { return "fake" }

func (s *fakeSink) Write(p []byte) (int, error) {
	if s.failWrites == 0 {
		return 0, s.writeErr
	}
	if s.failWrites > 0 {
		s.failWrites--
	}
	return s.buf.Write(p)
}

func (s *fakeSink) Close() error  { s.closed++; return nil }
func (s *fakeSink) Cancel() error { s.cancelled++; return nil }
