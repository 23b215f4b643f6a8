package wire

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// RemainingReq asks the leader what Key's limit has left.
type RemainingReq struct{ Key string }

// RemainingResp is the leader's answer: Code, and for CodeOK the count.
// The window's start and reset travel as Unix seconds: a quota's window is
// the leader's calendar, not a span from the answer.
type RemainingResp struct {
	Code      uint8
	Remaining raftpace.Remaining
	Msg       string
}

func (m RemainingReq) Encode() []byte { return appendString([]byte{Version}, m.Key) }

func DecodeRemainingReq(b []byte) (RemainingReq, error) {
	r := reader{b: b}
	r.start()
	m := RemainingReq{Key: r.string(fsm.MaxKeyLen)}
	return m, r.done()
}

func (m RemainingResp) Encode() []byte {
	x := m.Remaining
	b := []byte{Version, m.Code}
	b = binary.AppendUvarint(b, uint64(max(0, x.Tokens)))
	b = binary.AppendUvarint(b, uint64(max(0, x.Burst)))
	b = binary.AppendVarint(b, x.Quota)
	b = appendString(b, x.Per)
	b = binary.AppendVarint(b, x.Used)
	b = binary.AppendVarint(b, x.Left)
	b = binary.AppendVarint(b, unixOrZero(x.WindowStart))
	b = binary.AppendVarint(b, unixOrZero(x.Reset))
	return appendString(b, m.Msg)
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func timeOrZero(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}

// DecodeRemainingResp decodes the answer; key is the key asked, which the
// answer does not repeat.
func DecodeRemainingResp(b []byte, key string) (RemainingResp, error) {
	r := reader{b: b}
	r.start()
	m := RemainingResp{Code: r.byte()}
	x := &m.Remaining
	x.Key = key
	tokens, burst := r.uvarint(), r.uvarint()
	x.Quota = r.varint()
	x.Per = r.string(16)
	x.Used, x.Left = r.varint(), r.varint()
	start, reset := r.varint(), r.varint()
	m.Msg = r.string(MaxMsgLen)
	if err := r.done(); err != nil {
		return RemainingResp{}, err
	}
	if tokens > burst || burst > fsm.MaxBurst || x.Quota < 0 || x.Quota > fsm.MaxQuota || x.Used < 0 || x.Left < 0 || x.Left > x.Quota {
		return RemainingResp{}, fmt.Errorf("%w: remaining: tokens %d of burst %d, %d used and %d left of quota %d", ErrBadRPC, tokens, burst, x.Used, x.Left, x.Quota)
	}
	x.Tokens, x.Burst = int(tokens), int(burst)
	x.WindowStart, x.Reset = timeOrZero(start), timeOrZero(reset)
	return m, nil
}
