package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strconv"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/fuzzcorpus"
)

// decodeSeeds are the seed inputs of FuzzDecode: a valid encoding of every
// command type, and a few near misses.
func decodeSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	names := []string{"set-limit", "set-limit-2", "delete-limit", "extend-horizons-1", "extend-horizons-3", "upsert-member", "remove-member",
		"set-pause", "set-pause-clear", "set-cap", "delete-cap", "acquire-slots-1", "acquire-slots-3", "release-slots-1", "release-slots-3"}
	cmds := validCommands()
	if len(cmds) != len(names) {
		t.Fatalf("validCommands has %d commands, decodeSeeds names %d", len(cmds), len(names))
	}
	for i, c := range cmds {
		seeds["valid-"+names[i]] = mustEncode(t, c)
	}
	keys := make([]string, MaxSlotKeys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	seeds["valid-acquire-slots-max"] = mustEncode(t, AcquireSlots{ID: "s", Holder: "n", Keys: keys, TTL: MaxSlotTTL})
	seeds["valid-set-pause-max"] = mustEncode(t, SetPause{Key: "k", For: MaxPause})
	seeds["valid-set-cap-max"] = mustEncode(t, SetCap{Key: "k", Max: MaxCap})
	seeds["valid-set-limit-max"] = mustEncode(t, SetLimit{Key: "k", Limit: Limit{Rate: MaxRate, Burst: MaxBurst}})
	seeds["valid-set-limit-quota"] = mustEncode(t, SetLimit{Key: "k", Limit: Limit{Rate: 10, Burst: 10, Quota: 100000, Per: PerDay}})
	seeds["valid-commit-quotas"] = mustEncode(t, CommitQuotas{Entries: []QuotaEntry{{Key: "a", QuotaCount: QuotaCount{PerMonth, 1796083200, 7}}, {Key: "b"}}})
	seeds["invalid-commit-quotas-unaligned"] = mustEncodeRaw(CommitQuotas{Entries: []QuotaEntry{{Key: "a", QuotaCount: QuotaCount{PerDay, 1796083201, 7}}}})
	seeds["invalid-unknown-type"] = []byte{1, 99, 1, 'k'}
	seeds["invalid-version"] = []byte{2, 2, 1, 'k'}
	seeds["invalid-non-minimal"] = []byte{1, 2, 0x81, 0x00, 'k'}
	seeds["invalid-trailing"] = append(mustEncode(t, RemoveMember{ID: "n"}), 0)
	seeds["invalid-duplicate-keys"] = []byte{1, 3, 2, 1, 'k', 2, 1, 'k', 4}
	seeds["invalid-duplicate-slot-keys"] = []byte{1, 9, 1, 's', 1, 'n', 2, 1, 'k', 1, 'k', 2}
	seeds["invalid-duplicate-release-ids"] = []byte{1, 10, 2, 1, 's', 1, 's'}
	seeds["invalid-negative-pause"] = []byte{1, 6, 1, 'k', 1}
	return seeds
}

// restoreSeeds are the seed inputs of FuzzRestore: valid snapshots and a
// corrupt one.
func restoreSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	seeds["valid-empty"] = snapshotBytes(t, New())
	s := New()
	for i, c := range validCommands()[:7] { // the commands of version 1
		mustApply(t, s, uint64(i+1), c)
	}
	mustApply(t, s, 100, UpsertMember{Member: Member{ID: "node-2", Addr: "[::1]:7001", Fraction: 0.5}})
	mustApply(t, s, 101, SetLimit{Key: "z", Limit: Limit{Rate: 3, Burst: 2}})
	mustApply(t, s, 102, ExtendHorizons{Entries: []HorizonEntry{{Key: "z", Ahead: time.Second}}})
	seeds["valid-v1-empty"] = snapshotBytesV1(t, New())
	seeds["valid-v1-small"] = snapshotBytesV1(t, s)
	for i, c := range validCommands()[7:] {
		mustApply(t, s, uint64(103+i), c)
	}
	mustApply(t, s, 200, SetPause{Key: "z", For: time.Minute})
	mustApply(t, s, 201, SetPause{Key: "google-images", For: MaxPause})
	mustApply(t, s, 202, SetCap{Key: "z", Max: 2})
	mustApply(t, s, 203, AcquireSlots{ID: "node-2/1", Holder: "node-2", Keys: []string{"z", "google-images"}, TTL: time.Minute})
	mustApply(t, s, 204, AcquireSlots{ID: "node-1/9", Holder: "node-1", Keys: []string{"z"}, TTL: time.Second})
	seeds["valid-small"] = snapshotBytes(t, s)
	q := New()
	mustApply(t, q, 1, SetLimit{Key: "api", Limit: Limit{Rate: 10, Burst: 10, Quota: 100000, Per: PerDay}})
	mustApply(t, q, 2, CommitQuotas{Entries: []QuotaEntry{{Key: "api", QuotaCount: QuotaCount{PerDay, 1796515200, 1200}}}})
	seeds["valid-v4-quota"] = snapshotBytes(t, q)
	seeds["valid-random"] = snapshotBytes(t, randState(t, newRand(11), 8))
	bad := bytes.Clone(seeds["valid-small"])
	bad[len(bad)/2] ^= 0x10
	seeds["invalid-corrupt"] = bad
	return seeds
}

// TestFuzzCorpus checks that the seed corpora in testdata/fuzz match what
// the seeds above generate; run with -update-corpus to rewrite them.
func TestFuzzCorpus(t *testing.T) {
	for target, seeds := range map[string]map[string][]byte{
		"FuzzDecode":  decodeSeeds(t),
		"FuzzRestore": restoreSeeds(t),
	} {
		for name, b := range seeds {
			fuzzcorpus.Check(t, target, name, b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range decodeSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			if c != nil {
				t.Fatalf("Decode returned %#v and error %v", c, err)
			}
			if !errors.Is(err, ErrInvalidCommand) && !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("Decode error %q wraps neither ErrInvalidCommand nor ErrUnknownCommand", err)
			}
			return
		}
		// Whatever Decode accepts is valid and canonical.
		re, err := Encode(c)
		if err != nil {
			t.Fatalf("Decode accepted %x as %#v, which Encode rejects: %v", b, c, err)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("Decode(%x) = %#v re-encodes to %x", b, c, re)
		}
		s := New()
		if err := s.Apply(1, c); err != nil {
			t.Fatalf("Decode accepted %#v, which Apply rejects: %v", c, err)
		}
	})
}

func FuzzRestore(f *testing.F) {
	for _, b := range restoreSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRestore(t, b)
		// Random bytes almost never carry the right checksum; try them
		// again with it fixed, so the fuzzer reaches the decoder proper.
		if len(b) >= 4 {
			body := b[:len(b)-4]
			checkRestore(t, binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli)))
		}
	})
}

// checkRestore restores b into a non-empty State: a failure must wrap
// ErrInvalidSnapshot and change nothing; a success must snapshot back to b.
func checkRestore(t *testing.T, b []byte) {
	t.Helper()
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "keep", Limit: Limit{Rate: 1, Burst: 1}})
	mustApply(t, s, 2, ExtendHorizons{Entries: []HorizonEntry{{Key: "keep", Ahead: 1}}})
	before := snapshotBytes(t, s)
	if err := s.Restore(bytes.NewReader(b)); err != nil {
		if !errors.Is(err, ErrInvalidSnapshot) {
			t.Fatalf("Restore error %q does not wrap ErrInvalidSnapshot", err)
		}
		if !bytes.Equal(snapshotBytes(t, s), before) {
			t.Fatalf("failed Restore changed the state")
		}
		return
	}
	// Whatever Restore accepts is canonical: it snapshots to the same bytes,
	// or for version 1 to the same state in version 2.
	want := b
	if b[len(snapshotMagic)] == snapshotV1 {
		want = upgradeV1(b)
	}
	if after := snapshotBytes(t, s); !bytes.Equal(after, want) {
		t.Fatalf("Restore accepted %x, which snapshots as %x", b, after)
	}
}

// mustEncodeRaw encodes c without validating it (for invalid seeds).
func mustEncodeRaw(c CommitQuotas) []byte {
	b := []byte{codecVersion, typeCommitQuotas}
	b = binary.AppendUvarint(b, uint64(len(c.Entries)))
	for _, e := range c.Entries {
		b = appendString(b, e.Key)
		b = appendQuotaCount(b, e.QuotaCount)
	}
	return b
}
