package node

import (
	"math"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

func TestRPC_RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 2000; i++ {
		rr := wire.ReserveReq{MaxWait: time.Duration(rng.Int63n(int64(time.Hour)))}
		for k := 1 + rng.Intn(raftpace.MaxWants); k > 0; k-- {
			rr.Wants = append(rr.Wants, raftpace.Want{Key: randKey(rng), Count: 1 + rng.Intn(1000)})
		}
		if got, err := wire.DecodeReserveReq(rr.Encode()); err != nil || !reflect.DeepEqual(got, rr) {
			t.Fatalf("wire.ReserveReq %+v -> %+v, %v", rr, got, err)
		}
		rp := wire.ReserveResp{Code: uint8(rng.Intn(6)), Wait: time.Duration(rng.Int63()), Msg: randKey(rng)}
		if rng.Intn(2) == 0 {
			rp.Key = randKey(rng)
		}
		if got, err := wire.DecodeReserveResp(rp.Encode()); err != nil || got != rp {
			t.Fatalf("wire.ReserveResp %+v -> %+v, %v", rp, got, err)
		}
		sl := wire.SetLimitReq{Key: randKey(rng), Limit: fsm.Limit{Rate: rng.Float64() * 1e6, Burst: 1 + rng.Intn(1e6)}}
		if got, err := wire.DecodeSetLimitReq(sl.Encode()); err != nil || got != sl {
			t.Fatalf("wire.SetLimitReq %+v -> %+v, %v", sl, got, err)
		}
		ir := wire.IndexResp{Code: uint8(rng.Intn(6)), Index: rng.Uint64(), Msg: randKey(rng)}
		if got, err := wire.DecodeIndexResp(ir.Encode()); err != nil || got != ir {
			t.Fatalf("wire.IndexResp %+v -> %+v, %v", ir, got, err)
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
	good := wire.ReserveReq{Wants: []raftpace.Want{{Key: "key", Count: 3}}, MaxWait: time.Second}.Encode()
	for i := 0; i < len(good); i++ {
		if _, err := wire.DecodeReserveReq(good[:i]); err == nil {
			t.Errorf("prefix of %d bytes accepted", i)
		}
	}
	bad := append([]byte{}, good...)
	bad[0] = 99
	if _, err := wire.DecodeReserveReq(bad); err == nil {
		t.Error("wrong version accepted")
	}
	if _, err := wire.DecodeReserveReq(append(good, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	if _, err := wire.DecodeReserveReq(wire.ReserveReq{Wants: []raftpace.Want{{Key: "k", Count: 0}}}.Encode()); err == nil {
		t.Error("count 0 accepted")
	}
	huge := []byte{wire.Version, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := wire.DecodeReserveReq(huge); err == nil {
		t.Error("oversized key length accepted")
	}
	nan := wire.SetLimitReq{Key: "k", Limit: fsm.Limit{Rate: math.NaN(), Burst: 1}}.Encode()
	m, err := wire.DecodeSetLimitReq(nan)
	if err != nil {
		t.Fatal(err) // decoding is structural; validation follows in the handler
	}
	if m.Limit.Validate() == nil {
		t.Error("NaN rate validated")
	}
}
