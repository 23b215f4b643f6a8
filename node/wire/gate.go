package wire

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

type PauseReq struct {
	Key string
	For time.Duration
}

// PauseResp: Remaining is the pause in force after the request, measured
// by the leader; Index is the entry to wait for (0 when nothing changed).
type PauseResp struct {
	Code      uint8
	Index     uint64
	Remaining time.Duration
	Msg       string
}

type CapReq struct {
	Key string
	Max int // 0 deletes the cap
}

type AcquireReq struct {
	ID, Holder string
	Keys       []string
	TTL        time.Duration
	MaxWait    time.Duration
}

type AcquireResp struct {
	Code uint8
	Full []string // keys whose caps were full, for CodeConcurrency
	Msg  string
}

type ReleaseReq struct{ IDs []string }

func (m PauseReq) Encode() []byte {
	b := appendString([]byte{Version}, m.Key)
	return binary.AppendVarint(b, int64(m.For))
}

func DecodePauseReq(b []byte) (PauseReq, error) {
	r := reader{b: b}
	r.start()
	m := PauseReq{Key: r.string(fsm.MaxKeyLen), For: time.Duration(r.varint())}
	return m, r.done()
}

func (m PauseResp) Encode() []byte {
	b := []byte{Version, m.Code}
	b = binary.AppendUvarint(b, m.Index)
	b = binary.AppendVarint(b, int64(m.Remaining))
	return appendString(b, m.Msg)
}

func DecodePauseResp(b []byte) (PauseResp, error) {
	r := reader{b: b}
	r.start()
	m := PauseResp{Code: r.byte(), Index: r.uvarint(), Remaining: time.Duration(r.varint()), Msg: r.string(MaxMsgLen)}
	return m, r.done()
}

func (m CapReq) Encode() []byte {
	b := appendString([]byte{Version}, m.Key)
	return binary.AppendUvarint(b, uint64(m.Max))
}

func DecodeCapReq(b []byte) (CapReq, error) {
	r := reader{b: b}
	r.start()
	m := CapReq{Key: r.string(fsm.MaxKeyLen)}
	max := r.uvarint()
	if err := r.done(); err != nil {
		return CapReq{}, err
	}
	if max > fsm.MaxCap {
		return CapReq{}, fmt.Errorf("%w: cap %d exceeds %d", ErrBadRPC, max, fsm.MaxCap)
	}
	m.Max = int(max)
	return m, nil
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// strings reads a count (at most maxCount) and that many strings.
func (r *reader) strings(maxCount, maxLen int) []string {
	n := r.uvarint()
	if r.err != nil || n > uint64(maxCount) || n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, r.string(maxLen))
	}
	return out
}

func (m AcquireReq) Encode() []byte {
	b := []byte{Version}
	b = appendString(b, m.ID)
	b = appendString(b, m.Holder)
	b = appendStrings(b, m.Keys)
	b = binary.AppendVarint(b, int64(m.TTL))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func DecodeAcquireReq(b []byte) (AcquireReq, error) {
	r := reader{b: b}
	r.start()
	m := AcquireReq{ID: r.string(fsm.MaxIDLen), Holder: r.string(fsm.MaxIDLen)}
	m.Keys = r.strings(fsm.MaxSlotKeys, fsm.MaxKeyLen)
	m.TTL = time.Duration(r.varint())
	m.MaxWait = time.Duration(r.varint())
	return m, r.done()
}

func (m AcquireResp) Encode() []byte {
	b := []byte{Version, m.Code}
	b = appendStrings(b, m.Full)
	return appendString(b, m.Msg)
}

func DecodeAcquireResp(b []byte) (AcquireResp, error) {
	r := reader{b: b}
	r.start()
	m := AcquireResp{Code: r.byte(), Full: r.strings(fsm.MaxSlotKeys, fsm.MaxKeyLen), Msg: r.string(MaxMsgLen)}
	return m, r.done()
}

func (m ReleaseReq) Encode() []byte { return appendStrings([]byte{Version}, m.IDs) }

func DecodeReleaseReq(b []byte) (ReleaseReq, error) {
	r := reader{b: b}
	r.start()
	m := ReleaseReq{IDs: r.strings(fsm.MaxReleaseIDs, fsm.MaxIDLen)}
	return m, r.done()
}
