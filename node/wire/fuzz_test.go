package wire

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/fuzzcorpus"
)

// rpcCodec is one RPC message type: check decodes b and, if the decoder
// accepts it, checks the message survives a re-encode. It reports whether b
// was accepted.
type rpcCodec struct {
	name     string
	check    func(t *testing.T, b []byte) bool
	reencode func(b []byte) ([]byte, error) // decode then encode
}

// codecOf builds the rpcCodec of one message type. Whatever decode accepts
// must encode to at most as many bytes (varints may be non-minimal on the
// wire, so the bytes may differ), decode again to the same value, and that
// encoding must be a fixed point. Every refusal must wrap ErrBadRPC.
func codecOf[T any](name string, decode func([]byte) (T, error), encode func(T) []byte) rpcCodec {
	reencode := func(b []byte) ([]byte, error) {
		m, err := decode(b)
		if err != nil {
			return nil, err
		}
		return encode(m), nil
	}
	return rpcCodec{name: name, reencode: reencode, check: func(t *testing.T, b []byte) bool {
		t.Helper()
		m, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadRPC) {
				t.Errorf("%s: decode error %q does not wrap ErrBadRPC", name, err)
			}
			return false
		}
		if len(b) == 0 || b[0] != Version {
			t.Errorf("%s: accepted %x without the version byte", name, b)
		}
		e := encode(m)
		if len(e) > len(b) {
			t.Errorf("%s: %x decodes as %+v, which re-encodes longer: %x", name, b, m, e)
		}
		m2, err := decode(e)
		if err != nil || !sameMsg(m, m2) {
			t.Errorf("%s: %+v re-encodes as %x, which decodes as %+v, %v", name, m, e, m2, err)
			return true
		}
		if e2 := encode(m2); !bytes.Equal(e2, e) {
			t.Errorf("%s: encoding is not a fixed point: %x then %x", name, e, e2)
		}
		return true
	}}
}

// sameMsg compares decoded messages; a float compares by its bits, so a NaN
// rate equals itself.
func sameMsg(a, b any) bool {
	if sa, ok := a.(SetLimitReq); ok {
		sb := b.(SetLimitReq)
		return sa.Key == sb.Key && sa.Limit.Burst == sb.Limit.Burst && sa.Limit.DryRun == sb.Limit.DryRun &&
			sa.Limit.Quota == sb.Limit.Quota && sa.Limit.Per == sb.Limit.Per &&
			math.Float64bits(sa.Limit.Rate) == math.Float64bits(sb.Limit.Rate)
	}
	if sa, ok := a.(ShareAnswer); ok {
		sb := b.(ShareAnswer)
		return sa.Applied == sb.Applied && sa.Busy == sb.Busy &&
			math.Float64bits(sa.Fraction) == math.Float64bits(sb.Fraction)
	}
	return reflect.DeepEqual(a, b)
}

// rpcCodecs lists every message the transport carries between nodes: each
// decoder in rpc.go and rpc_gate.go. TestRPCCodecsComplete keeps it whole.
var rpcCodecs = []rpcCodec{
	codecOf("ReserveReq", DecodeReserveReq, ReserveReq.Encode),
	codecOf("ReserveResp", DecodeReserveResp, ReserveResp.Encode),
	codecOf("SetLimitReq", DecodeSetLimitReq, SetLimitReq.Encode),
	codecOf("IndexResp", DecodeIndexResp, IndexResp.Encode),
	codecOf("RemoveServerReq", DecodeRemoveServerReq, RemoveServerReq.Encode),
	codecOf("LeaseReq", DecodeLeaseReq, LeaseReq.Encode),
	codecOf("LeaseResp", DecodeLeaseResp, LeaseResp.Encode),
	codecOf("LeasesReq", DecodeLeasesReq, LeasesReq.Encode),
	codecOf("LeasesResp", DecodeLeasesResp, LeasesResp.Encode),
	codecOf("ShareReq", DecodeShareReq, ShareReq.Encode),
	codecOf("ShareAnswer", DecodeShareAnswer, ShareAnswer.Encode),
	codecOf("PauseReq", DecodePauseReq, PauseReq.Encode),
	codecOf("PauseResp", DecodePauseResp, PauseResp.Encode),
	codecOf("CapReq", DecodeCapReq, CapReq.Encode),
	codecOf("AcquireReq", DecodeAcquireReq, AcquireReq.Encode),
	codecOf("AcquireResp", DecodeAcquireResp, AcquireResp.Encode),
	codecOf("ReleaseReq", DecodeReleaseReq, ReleaseReq.Encode),
	codecOf("RemainingReq", DecodeRemainingReq, RemainingReq.Encode),
	codecOf("RemainingResp", func(b []byte) (RemainingResp, error) { return DecodeRemainingResp(b, "k") }, RemainingResp.Encode),
}

// TestRPCCodecsComplete fails when a decoder is added to the package
// without being added to rpcCodecs (and so to FuzzRPCDecode).
func TestRPCCodecsComplete(t *testing.T) {
	var src []byte
	for _, f := range []string{"rate.go", "gate.go", "remaining.go", "leases.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	fuzzed := map[string]bool{}
	for _, c := range rpcCodecs {
		fuzzed[c.name] = true
	}
	for _, line := range bytes.Split(src, []byte("\n")) {
		name, ok := bytes.CutPrefix(line, []byte("func Decode"))
		if !ok {
			continue
		}
		name, _, _ = bytes.Cut(name, []byte("("))
		if !fuzzed[string(name)] {
			t.Errorf("Decode%s is not in rpcCodecs: FuzzRPCDecode does not cover it", name)
		}
	}
}

// rpcSeed is one seed input of FuzzRPCDecode: its file name under
// testdata/fuzz/FuzzRPCDecode, the message it was made for, and its bytes.
// The name says how that message's decoder must take it: valid-* are real
// encodings (accepted, and re-encoded to the same bytes), noncanonical-* are
// accepted but encode shorter, invalid-* are refused.
type rpcSeed struct {
	name, msg string
	b         []byte
}

// rpcSeeds: a real encoding of every message, and near misses.
func rpcSeeds() []rpcSeed {
	keys := make([]string, fsm.MaxSlotKeys)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	good := ReserveReq{Wants: one("k", 3), MaxWait: time.Second}.Encode()
	return []rpcSeed{
		{"valid-reserve-req", "ReserveReq", ReserveReq{Wants: one("provider:acme", 1), MaxWait: time.Second}.Encode()},
		{"valid-reserve-req-max", "ReserveReq", ReserveReq{Wants: one(strings.Repeat("k", fsm.MaxKeyLen), math.MaxInt32), MaxWait: math.MaxInt64}.Encode()},
		{"valid-reserve-req-all", "ReserveReq", ReserveReq{Wants: []raftpace.Want{{Key: "tenant:a", Count: 1}, {Key: "global", Count: 2}}, MaxWait: time.Second}.Encode()},
		{"valid-reserve-req-all-max", "ReserveReq", ReserveReq{Wants: wants(raftpace.MaxWants), MaxWait: time.Second}.Encode()},
		{"valid-reserve-resp-limited-key", "ReserveResp", ReserveResp{Code: CodeLimitExceeded, Wait: time.Second, Msg: "limit", Key: "global"}.Encode()},
		{"valid-reserve-resp", "ReserveResp", ReserveResp{Code: CodeOK, Wait: 5 * time.Millisecond}.Encode()},
		{"valid-reserve-resp-limited", "ReserveResp", ReserveResp{Code: CodeLimitExceeded, Wait: time.Minute, Msg: "node: limit exceeded"}.Encode()},
		{"valid-set-limit-req", "SetLimitReq", SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: 200, Burst: 10}}.Encode()},
		{"valid-set-limit-req-dry-run", "SetLimitReq", SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: 5, Burst: 1, DryRun: true}}.Encode()},
		{"valid-set-limit-req-quota", "SetLimitReq", SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 10, Quota: 100000, Per: fsm.PerDay}}.Encode()},
		{"valid-set-limit-req-quota-dry-run", "SetLimitReq", SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1, DryRun: true, Quota: 5, Per: fsm.PerMinute}}.Encode()},
		{"valid-remaining-req", "RemainingReq", RemainingReq{Key: "tenant:acme"}.Encode()},
		{"valid-remaining-resp", "RemainingResp", RemainingResp{Code: CodeOK, Remaining: raftpace.Remaining{Key: "k", Tokens: 3, Burst: 10, Quota: 100000, Per: "day", Used: 7, Left: 99993, WindowStart: time.Unix(1796515200, 0).UTC(), Reset: time.Unix(1796601600, 0).UTC()}}.Encode()},
		{"valid-reserve-resp-quota", "ReserveResp", ReserveResp{Code: CodeQuotaExhausted, Wait: time.Hour, Msg: "quota", Key: "global"}.Encode()},
		{"invalid-set-limit-req-dry-0", "SetLimitReq", append(SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: 1, Burst: 1}}.Encode(), 0)},
		{"invalid-remaining-resp-left-past-quota", "RemainingResp", RemainingResp{Code: CodeOK, Remaining: raftpace.Remaining{Quota: 5, Left: 6}}.Encode()},
		{"valid-set-limit-req-nan", "SetLimitReq", SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: math.NaN(), Burst: 1}}.Encode()},
		{"valid-index-resp", "IndexResp", IndexResp{Code: CodeOK, Index: 42}.Encode()},
		{"valid-index-resp-error", "IndexResp", IndexResp{Code: CodeUnavailable, Msg: "no quorum"}.Encode()},
		{"valid-remove-server-req", "RemoveServerReq", RemoveServerReq{ID: "n1"}.Encode()},
		{"valid-lease-req", "LeaseReq", LeaseReq{Key: "k", Holder: "n2", Count: 64, MaxWait: 250 * time.Millisecond}.Encode()},
		{"valid-lease-resp", "LeaseResp", LeaseResp{Code: CodeOK, Lease: Lease{Base: -10_000_000, Spacing: 5_000_000, Count: 40}}.Encode()},
		{"valid-lease-resp-limited", "LeaseResp", LeaseResp{Code: CodeLimitExceeded, Wait: 3 * time.Second, Msg: "limit"}.Encode()},
		{"valid-leases-req", "LeasesReq", LeasesReq{Holder: "n2", Park: true, Items: []LeaseItem{{ID: 1, Key: "tenant:a", Count: 1, MaxWait: time.Second}, {ID: 2, Key: "tenant:b", Count: 8}}}.Encode()},
		{"valid-leases-req-poll", "LeasesReq", LeasesReq{Holder: "n2", Park: true}.Encode()},
		{"valid-leases-resp", "LeasesResp", LeasesResp{Code: CodeOK, Items: []LeaseAnswer{{ID: 1, LeaseResp: LeaseResp{Code: CodeOK, Lease: Lease{Base: 700_000_000, Spacing: 1_000_000_000, Count: 1, Held: 3_000_000}}}, {ID: 2, LeaseResp: LeaseResp{Code: CodeLimitExceeded, Wait: time.Second, Msg: "limit"}}}}.Encode()},
		{"valid-leases-resp-not-leader", "LeasesResp", LeasesResp{Code: CodeNotLeader, Msg: "not the leader"}.Encode()},
		{"invalid-leases-resp-empty-lease", "LeasesResp", LeasesResp{Items: []LeaseAnswer{{ID: 1, LeaseResp: LeaseResp{Code: CodeOK}}}}.Encode()},
		{"invalid-leases-req-count-0", "LeasesReq", LeasesReq{Holder: "n2", Items: []LeaseItem{{ID: 1, Key: "k"}}}.Encode()},
		{"valid-share-req", "ShareReq", ShareReq{Leader: "n1"}.Encode()},
		{"valid-share-answer", "ShareAnswer", ShareAnswer{Applied: 99, Fraction: 1.0 / 3, Busy: time.Second}.Encode()},
		{"valid-pause-req", "PauseReq", PauseReq{Key: "google-images", For: 30 * time.Second}.Encode()},
		{"valid-pause-resp", "PauseResp", PauseResp{Code: CodeOK, Index: 7, Remaining: 29 * time.Second}.Encode()},
		{"valid-cap-req", "CapReq", CapReq{Key: "k", Max: 3}.Encode()},
		{"valid-cap-req-delete", "CapReq", CapReq{Key: "k"}.Encode()},
		{"valid-cap-req-max", "CapReq", CapReq{Key: "k", Max: fsm.MaxCap}.Encode()},
		{"valid-acquire-req", "AcquireReq", AcquireReq{ID: "n2/1", Holder: "n2", Keys: []string{"a", "b"}, TTL: time.Minute, MaxWait: time.Second}.Encode()},
		{"valid-acquire-req-no-keys", "AcquireReq", AcquireReq{ID: "n2/2", Holder: "n2", Keys: []string{}, TTL: 1}.Encode()},
		{"valid-acquire-req-max-keys", "AcquireReq", AcquireReq{ID: "n1/1", Holder: "n1", Keys: keys, TTL: fsm.MaxSlotTTL, MaxWait: 5 * time.Second}.Encode()},
		{"valid-acquire-resp", "AcquireResp", AcquireResp{Code: CodeOK, Full: []string{}}.Encode()},
		{"valid-acquire-resp-full", "AcquireResp", AcquireResp{Code: CodeConcurrency, Full: []string{"a", "b"}, Msg: "full"}.Encode()},
		{"valid-release-req", "ReleaseReq", ReleaseReq{IDs: []string{"n2/1", "n2/2", "n3/9"}}.Encode()},

		// 0x81 0x00 is a non-minimal varint for 1.
		{"noncanonical-index-resp", "IndexResp", []byte{Version, CodeOK, 0x81, 0x00, 0}},
		{"noncanonical-release-req", "ReleaseReq", []byte{Version, 0x81, 0x00, 1, 'x'}},

		{"invalid-empty", "ReserveReq", []byte{}},
		{"invalid-version", "ReserveReq", append([]byte{Version + 1}, good[1:]...)},
		{"invalid-truncated", "ReserveReq", good[:len(good)-1]},
		{"invalid-trailing", "ReserveReq", append(bytes.Clone(good), 0)},
		{"invalid-reserve-count-0", "ReserveReq", ReserveReq{Wants: one("k", 0)}.Encode()},
		{"invalid-reserve-too-many-keys", "ReserveReq", ReserveReq{Wants: wants(raftpace.MaxWants + 1)}.Encode()},
		{"invalid-reserve-resp-empty-key", "ReserveResp", append(ReserveResp{Code: CodeOK}.Encode(), 0)},
		{"invalid-huge-key-length", "ReserveReq", []byte{Version, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"invalid-lease-spacing-0", "LeaseResp", LeaseResp{Code: CodeOK, Lease: Lease{Spacing: 0, Count: 5}}.Encode()},
		{"invalid-share-answer-nan", "ShareAnswer", ShareAnswer{Applied: 1, Fraction: math.NaN()}.Encode()},
		{"invalid-share-answer-negative-busy", "ShareAnswer", ShareAnswer{Applied: 1, Fraction: 0.5, Busy: -1}.Encode()},
		{"invalid-cap-too-large", "CapReq", CapReq{Key: "k", Max: fsm.MaxCap + 1}.Encode()},
		{"invalid-acquire-too-many-keys", "AcquireReq", AcquireReq{ID: "n1/1", Holder: "n1", Keys: append(keys, "one-too-many"), TTL: time.Second}.Encode()},
		// 0xff 0x1f is 4095 ids: within MaxReleaseIDs, past the input's end.
		{"invalid-release-count-past-end", "ReleaseReq", []byte{Version, 0xff, 0x1f, 1, 'x'}},
	}
}

// TestFuzzCorpus checks that testdata/fuzz/FuzzRPCDecode holds what
// rpcSeeds generates (other files there, found by the fuzzer, are kept),
// and that each seed's decoder takes it as its name says. Run with
// -update-corpus to rewrite the files.
func TestFuzzCorpus(t *testing.T) {
	codecs := map[string]rpcCodec{}
	for _, c := range rpcCodecs {
		codecs[c.name] = c
	}
	for _, seed := range rpcSeeds() {
		c, ok := codecs[seed.msg]
		if !ok {
			t.Fatalf("seed %s: no codec %q", seed.name, seed.msg)
		}
		kind, _, _ := strings.Cut(seed.name, "-")
		if accepted := c.check(t, seed.b); accepted != (kind != "invalid") {
			t.Errorf("seed %s: %s accepted = %v", seed.name, seed.msg, accepted)
		}
		if kind == "valid" || kind == "noncanonical" {
			m, err := c.reencode(seed.b)
			if err != nil || bytes.Equal(m, seed.b) != (kind == "valid") {
				t.Errorf("seed %s: re-encodes as %x (%v), input %x", seed.name, m, err, seed.b)
			}
		}
		fuzzcorpus.Check(t, "FuzzRPCDecode", seed.name, seed.b)
	}
}

// FuzzRPCDecode feeds the same bytes to every RPC decoder: none may panic,
// and whatever one accepts must survive a re-encode (see codecOf). Seeds are
// rpcSeeds, checked in under testdata/fuzz/FuzzRPCDecode.
func FuzzRPCDecode(f *testing.F) {
	for _, seed := range rpcSeeds() {
		f.Add(seed.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range rpcCodecs {
			c.check(t, b)
		}
	})
}

func one(key string, count int) []raftpace.Want { return []raftpace.Want{{Key: key, Count: count}} }

// wants returns n wants of distinct keys.
func wants(n int) []raftpace.Want {
	w := make([]raftpace.Want, n)
	for i := range w {
		w[i] = raftpace.Want{Key: "key-" + strconv.Itoa(i), Count: 1}
	}
	return w
}
