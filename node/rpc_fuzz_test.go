package node

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
// encoding must be a fixed point. Every refusal must wrap errBadRPC.
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
			if !errors.Is(err, errBadRPC) {
				t.Errorf("%s: decode error %q does not wrap errBadRPC", name, err)
			}
			return false
		}
		if len(b) == 0 || b[0] != rpcVersion {
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
	if sa, ok := a.(setLimitReq); ok {
		sb := b.(setLimitReq)
		return sa.Key == sb.Key && sa.Limit.Burst == sb.Limit.Burst &&
			math.Float64bits(sa.Limit.Rate) == math.Float64bits(sb.Limit.Rate)
	}
	if sa, ok := a.(shareAnswer); ok {
		sb := b.(shareAnswer)
		return sa.Applied == sb.Applied && sa.Busy == sb.Busy &&
			math.Float64bits(sa.Fraction) == math.Float64bits(sb.Fraction)
	}
	return reflect.DeepEqual(a, b)
}

// rpcCodecs lists every message the transport carries between nodes: each
// decoder in rpc.go and rpc_gate.go. TestRPCCodecsComplete keeps it whole.
var rpcCodecs = []rpcCodec{
	codecOf("reserveReq", decodeReserveReq, reserveReq.encode),
	codecOf("reserveResp", decodeReserveResp, reserveResp.encode),
	codecOf("setLimitReq", decodeSetLimitReq, setLimitReq.encode),
	codecOf("indexResp", decodeIndexResp, indexResp.encode),
	codecOf("removeServerReq", decodeRemoveServerReq, removeServerReq.encode),
	codecOf("leaseReq", decodeLeaseReq, leaseReq.encode),
	codecOf("leaseResp", decodeLeaseResp, leaseResp.encode),
	codecOf("shareReq", decodeShareReq, shareReq.encode),
	codecOf("shareAnswer", decodeShareAnswer, shareAnswer.encode),
	codecOf("pauseReq", decodePauseReq, pauseReq.encode),
	codecOf("pauseResp", decodePauseResp, pauseResp.encode),
	codecOf("capReq", decodeCapReq, capReq.encode),
	codecOf("acquireReq", decodeAcquireReq, acquireReq.encode),
	codecOf("acquireResp", decodeAcquireResp, acquireResp.encode),
	codecOf("releaseReq", decodeReleaseReq, releaseReq.encode),
}

// TestRPCCodecsComplete fails when a decoder is added to the package
// without being added to rpcCodecs (and so to FuzzRPCDecode).
func TestRPCCodecsComplete(t *testing.T) {
	var src []byte
	for _, f := range []string{"rpc.go", "rpc_gate.go"} {
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
		name, ok := bytes.CutPrefix(line, []byte("func decode"))
		if !ok {
			continue
		}
		name, _, _ = bytes.Cut(name, []byte("("))
		msg := string(bytes.ToLower(name[:1])) + string(name[1:])
		if !fuzzed[msg] {
			t.Errorf("decode%s is not in rpcCodecs: FuzzRPCDecode does not cover it", name)
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
	good := reserveReq{Key: "k", Count: 3, MaxWait: time.Second}.encode()
	return []rpcSeed{
		{"valid-reserve-req", "reserveReq", reserveReq{Key: "provider:acme", Count: 1, MaxWait: time.Second}.encode()},
		{"valid-reserve-req-max", "reserveReq", reserveReq{Key: strings.Repeat("k", fsm.MaxKeyLen), Count: math.MaxInt32, MaxWait: math.MaxInt64}.encode()},
		{"valid-reserve-resp", "reserveResp", reserveResp{Code: codeOK, Wait: 5 * time.Millisecond}.encode()},
		{"valid-reserve-resp-limited", "reserveResp", reserveResp{Code: codeLimitExceeded, Wait: time.Minute, Msg: "node: limit exceeded"}.encode()},
		{"valid-set-limit-req", "setLimitReq", setLimitReq{Key: "k", Limit: fsm.Limit{Rate: 200, Burst: 10}}.encode()},
		{"valid-set-limit-req-nan", "setLimitReq", setLimitReq{Key: "k", Limit: fsm.Limit{Rate: math.NaN(), Burst: 1}}.encode()},
		{"valid-index-resp", "indexResp", indexResp{Code: codeOK, Index: 42}.encode()},
		{"valid-index-resp-error", "indexResp", indexResp{Code: codeUnavailable, Msg: "no quorum"}.encode()},
		{"valid-remove-server-req", "removeServerReq", removeServerReq{ID: "n1"}.encode()},
		{"valid-lease-req", "leaseReq", leaseReq{Key: "k", Holder: "n2", Count: 64, MaxWait: 250 * time.Millisecond}.encode()},
		{"valid-lease-resp", "leaseResp", leaseResp{Code: codeOK, Lease: lease{Base: -10_000_000, Spacing: 5_000_000, Count: 40}}.encode()},
		{"valid-lease-resp-limited", "leaseResp", leaseResp{Code: codeLimitExceeded, Wait: 3 * time.Second, Msg: "limit"}.encode()},
		{"valid-share-req", "shareReq", shareReq{Leader: "n1"}.encode()},
		{"valid-share-answer", "shareAnswer", shareAnswer{Applied: 99, Fraction: 1.0 / 3, Busy: time.Second}.encode()},
		{"valid-pause-req", "pauseReq", pauseReq{Key: "google-images", For: 30 * time.Second}.encode()},
		{"valid-pause-resp", "pauseResp", pauseResp{Code: codeOK, Index: 7, Remaining: 29 * time.Second}.encode()},
		{"valid-cap-req", "capReq", capReq{Key: "k", Max: 3}.encode()},
		{"valid-cap-req-delete", "capReq", capReq{Key: "k"}.encode()},
		{"valid-cap-req-max", "capReq", capReq{Key: "k", Max: fsm.MaxCap}.encode()},
		{"valid-acquire-req", "acquireReq", acquireReq{ID: "n2/1", Holder: "n2", Keys: []string{"a", "b"}, TTL: time.Minute, MaxWait: time.Second}.encode()},
		{"valid-acquire-req-no-keys", "acquireReq", acquireReq{ID: "n2/2", Holder: "n2", Keys: []string{}, TTL: 1}.encode()},
		{"valid-acquire-req-max-keys", "acquireReq", acquireReq{ID: "n1/1", Holder: "n1", Keys: keys, TTL: fsm.MaxSlotTTL, MaxWait: 5 * time.Second}.encode()},
		{"valid-acquire-resp", "acquireResp", acquireResp{Code: codeOK, Full: []string{}}.encode()},
		{"valid-acquire-resp-full", "acquireResp", acquireResp{Code: codeConcurrency, Full: []string{"a", "b"}, Msg: "full"}.encode()},
		{"valid-release-req", "releaseReq", releaseReq{IDs: []string{"n2/1", "n2/2", "n3/9"}}.encode()},

		// 0x81 0x00 is a non-minimal varint for 1.
		{"noncanonical-index-resp", "indexResp", []byte{rpcVersion, codeOK, 0x81, 0x00, 0}},
		{"noncanonical-release-req", "releaseReq", []byte{rpcVersion, 0x81, 0x00, 1, 'x'}},

		{"invalid-empty", "reserveReq", []byte{}},
		{"invalid-version", "reserveReq", append([]byte{rpcVersion + 1}, good[1:]...)},
		{"invalid-truncated", "reserveReq", good[:len(good)-1]},
		{"invalid-trailing", "reserveReq", append(bytes.Clone(good), 0)},
		{"invalid-reserve-count-0", "reserveReq", reserveReq{Key: "k", Count: 0}.encode()},
		{"invalid-huge-key-length", "reserveReq", []byte{rpcVersion, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"invalid-lease-spacing-0", "leaseResp", leaseResp{Code: codeOK, Lease: lease{Spacing: 0, Count: 5}}.encode()},
		{"invalid-share-answer-nan", "shareAnswer", shareAnswer{Applied: 1, Fraction: math.NaN()}.encode()},
		{"invalid-share-answer-negative-busy", "shareAnswer", shareAnswer{Applied: 1, Fraction: 0.5, Busy: -1}.encode()},
		{"invalid-cap-too-large", "capReq", capReq{Key: "k", Max: fsm.MaxCap + 1}.encode()},
		{"invalid-acquire-too-many-keys", "acquireReq", acquireReq{ID: "n1/1", Holder: "n1", Keys: append(keys, "one-too-many"), TTL: time.Second}.encode()},
		// 0xff 0x1f is 4095 ids: within MaxReleaseIDs, past the input's end.
		{"invalid-release-count-past-end", "releaseReq", []byte{rpcVersion, 0xff, 0x1f, 1, 'x'}},
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
