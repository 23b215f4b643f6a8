package node

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestRPC_RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 2000; i++ {
		rr := reserveReq{Key: randKey(rng), Count: 1 + rng.Intn(1000), MaxWait: time.Duration(rng.Int63n(int64(time.Hour)))}
		if got, err := decodeReserveReq(rr.encode()); err != nil || got != rr {
			t.Fatalf("reserveReq %+v -> %+v, %v", rr, got, err)
		}
		rp := reserveResp{Code: uint8(rng.Intn(6)), Wait: time.Duration(rng.Int63()), Msg: randKey(rng)}
		if got, err := decodeReserveResp(rp.encode()); err != nil || got != rp {
			t.Fatalf("reserveResp %+v -> %+v, %v", rp, got, err)
		}
		sl := setLimitReq{Key: randKey(rng), Limit: fsm.Limit{Rate: rng.Float64() * 1e6, Burst: 1 + rng.Intn(1e6)}}
		if got, err := decodeSetLimitReq(sl.encode()); err != nil || got != sl {
			t.Fatalf("setLimitReq %+v -> %+v, %v", sl, got, err)
		}
		ir := indexResp{Code: uint8(rng.Intn(6)), Index: rng.Uint64(), Msg: randKey(rng)}
		if got, err := decodeIndexResp(ir.encode()); err != nil || got != ir {
			t.Fatalf("indexResp %+v -> %+v, %v", ir, got, err)
		}
	}
}

func randKey(rng *rand.Rand) string {
	b := make([]byte, 1+rng.Intn(40))
	for i := range b {
		b[i] = byte('a' + rng.Intn(26))
	}
	return string(b)
}

// Every strict prefix, a wrong version and trailing bytes are refused.
func TestRPC_RejectsMalformed(t *testing.T) {
	good := reserveReq{Key: "key", Count: 3, MaxWait: time.Second}.encode()
	for i := 0; i < len(good); i++ {
		if _, err := decodeReserveReq(good[:i]); err == nil {
			t.Errorf("prefix of %d bytes accepted", i)
		}
	}
	bad := append([]byte{}, good...)
	bad[0] = 99
	if _, err := decodeReserveReq(bad); err == nil {
		t.Error("wrong version accepted")
	}
	if _, err := decodeReserveReq(append(good, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	if _, err := decodeReserveReq(reserveReq{Key: "k", Count: 0}.encode()); err == nil {
		t.Error("count 0 accepted")
	}
	huge := []byte{rpcVersion, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := decodeReserveReq(huge); err == nil {
		t.Error("oversized key length accepted")
	}
	nan := setLimitReq{Key: "k", Limit: fsm.Limit{Rate: math.NaN(), Burst: 1}}.encode()
	m, err := decodeSetLimitReq(nan)
	if err != nil {
		t.Fatal(err) // decoding is structural; validation follows in the handler
	}
	if m.Limit.Validate() == nil {
		t.Error("NaN rate validated")
	}
}
