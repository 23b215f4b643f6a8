package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// MethodLeases carries a member's lease requests of many keys in one
// message, and brings back the answers of many (package node/batch).
const MethodLeases uint8 = 12

// ErrWouldWait: the leader's pacer, asked not to wait (pacer.TryLease),
// found the request must.
var ErrWouldWait = errors.New("node: lease would wait")

// MaxLeaseItems bounds the requests, and the answers, in one message: at
// the longest key (256 bytes) a message stays under a third of the
// transport's default frame (1 MiB).
const MaxLeaseItems = 1024

// LeasesReq is a member's message to the leader: new lease requests (any
// number up to MaxLeaseItems, none at all for a poll) and whether the
// leader may keep the message until it has answers for it (Park) or must
// answer at once with what it has.
type LeasesReq struct {
	Holder string // the asking node's id
	Park   bool
	Items  []LeaseItem
}

// LeaseItem is one lease request: up to Count slots of Key within
// MaxWait. ID is the member's, unique among its requests in flight; the
// answer names it.
type LeaseItem struct {
	ID      uint64
	Key     string
	Count   int
	MaxWait time.Duration
}

// LeasesResp is the leader's answer: Code other than CodeOK refuses the
// whole message (CodeNotLeader: ask the leader); else the answers ready
// for this member, of this message's requests or of earlier ones.
//
// Recv and Sent are the leader's clock when the message came and when its
// answer left, Epoch names that clock (a restarted leader's is another):
// with the member's own clock at its send and at the answer, each
// exchange bounds the offset between the two clocks, and the member places
// a lease from the tightest bounds of many exchanges rather than from
// this one's round trip (package node/batch).
type LeasesResp struct {
	Code       uint8
	Msg        string
	Epoch      int64
	Recv, Sent int64
	Items      []LeaseAnswer
}

// LeaseAnswer answers the request ID as a LeaseResp answers one. A granted
// lease is stated from Age before Sent (0 for most: a lease is restated
// as its answer leaves, but never past its first slot).
type LeaseAnswer struct {
	ID  uint64
	Age int64
	LeaseResp
}

func (m LeasesReq) Encode() []byte {
	b := make([]byte, 0, 8+len(m.Holder)+len(m.Items)*32)
	b = append(b, Version)
	b = appendString(b, m.Holder)
	b = appendBool(b, m.Park)
	b = binary.AppendUvarint(b, uint64(len(m.Items)))
	for _, it := range m.Items {
		b = binary.AppendUvarint(b, it.ID)
		b = appendString(b, it.Key)
		b = binary.AppendUvarint(b, uint64(it.Count))
		b = binary.AppendVarint(b, int64(it.MaxWait))
	}
	return b
}

func DecodeLeasesReq(b []byte) (LeasesReq, error) {
	r := reader{b: b}
	r.start()
	m := LeasesReq{Holder: r.string(fsm.MaxIDLen), Park: r.bool()}
	n := r.uvarint()
	if n > MaxLeaseItems {
		return LeasesReq{}, fmt.Errorf("%w: %d lease requests in one message (at most %d)", ErrBadRPC, n, MaxLeaseItems)
	}
	if n > 0 && r.err == nil {
		m.Items = make([]LeaseItem, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		it := LeaseItem{ID: r.uvarint(), Key: r.string(fsm.MaxKeyLen)}
		count := r.uvarint()
		it.MaxWait = time.Duration(r.varint())
		if r.err == nil && (count < 1 || count > math.MaxInt32) {
			return LeasesReq{}, fmt.Errorf("%w: lease request %d: count %d", ErrBadRPC, it.ID, count)
		}
		it.Count = int(count)
		m.Items = append(m.Items, it)
	}
	if err := r.done(); err != nil {
		return LeasesReq{}, err
	}
	return m, nil
}

func (m LeasesResp) Encode() []byte {
	b := make([]byte, 0, 8+len(m.Msg)+len(m.Items)*24)
	b = append(b, Version, m.Code)
	b = appendString(b, m.Msg)
	b = binary.AppendVarint(b, m.Epoch)
	b = binary.AppendVarint(b, m.Recv)
	b = binary.AppendVarint(b, m.Sent)
	b = binary.AppendUvarint(b, uint64(len(m.Items)))
	for _, it := range m.Items {
		b = binary.AppendUvarint(b, it.ID)
		b = binary.AppendVarint(b, it.Age)
		b = append(b, it.LeaseResp.Encode()[1:]...) // without its version byte
	}
	return b
}

func DecodeLeasesResp(b []byte) (LeasesResp, error) {
	r := reader{b: b}
	r.start()
	m := LeasesResp{Code: r.byte(), Msg: r.string(MaxMsgLen), Epoch: r.varint(), Recv: r.varint(), Sent: r.varint()}
	if r.err == nil && m.Sent < m.Recv {
		return LeasesResp{}, fmt.Errorf("%w: an answer that left (%d) before its message came (%d)", ErrBadRPC, m.Sent, m.Recv)
	}
	n := r.uvarint()
	if n > MaxLeaseItems {
		return LeasesResp{}, fmt.Errorf("%w: %d lease answers in one message (at most %d)", ErrBadRPC, n, MaxLeaseItems)
	}
	if n > 0 && r.err == nil {
		m.Items = make([]LeaseAnswer, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		a := LeaseAnswer{ID: r.uvarint(), Age: r.varint()}
		a.LeaseResp = readLeaseResp(&r)
		if r.err == nil {
			if err := a.LeaseResp.check(); err != nil {
				return LeasesResp{}, err
			}
			if a.Age < 0 {
				return LeasesResp{}, fmt.Errorf("%w: lease answer %d stated %dns after its message left", ErrBadRPC, a.ID, -a.Age)
			}
		}
		m.Items = append(m.Items, a)
	}
	if err := r.done(); err != nil {
		return LeasesResp{}, err
	}
	return m, nil
}
