package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// RPC methods carried by the transport between nodes. Each request and
// response starts with a version byte; an unknown version is refused, so
// nodes of different versions fail loudly rather than misread each other.
const (
	rpcReserve      uint8 = 1 // follower -> leader: grant events of a key
	rpcSetLimit     uint8 = 2 // follower -> leader: commit a limit
	rpcRemoveServer uint8 = 3 // leaving node -> leader: remove it from raft
	rpcLease        uint8 = 4 // any node -> leader: a run of slots of a key
	rpcShare        uint8 = 5 // leader -> member: renew the share lease

	rpcVersion uint8 = 1
)

// Result codes of RPC responses.
const (
	codeOK uint8 = iota
	codeNotLeader
	codeLimitExceeded
	codeUnknownKey
	codeInvalid
	codeUnavailable
)

var errBadRPC = errors.New("node: malformed rpc message")

type reserveReq struct {
	Key     string
	Count   int
	MaxWait time.Duration
}

type reserveResp struct {
	Code uint8
	Wait time.Duration // the grant's wait, or the would-be wait for codeLimitExceeded
	Held time.Duration // how long the leader held the request before the grant
	Msg  string
}

type setLimitReq struct {
	Key   string
	Limit fsm.Limit
}

// indexResp answers requests that commit something: the raft index to wait
// for before a read on the asking node reflects the change.
type indexResp struct {
	Code  uint8
	Index uint64
	Msg   string
}

// removeServerReq: member ID leaves. Busy is how far past the request its
// own fallback slots (and pool grants counting its fraction) still reach;
// the leader counts its fraction from the request's arrival plus Busy.
type removeServerReq struct {
	ID   string
	Busy time.Duration
}

type shareReq struct{ Leader string }

// shareAnswer is a member's answer to a renewal: it applies Fraction as of
// raft index Applied, and its fallback slots reach Busy past the answer.
type shareAnswer struct {
	Applied  uint64
	Fraction float64
	Busy     time.Duration
	// Fenced: the witness (Postgres) says a leader fenced this member; the
	// leader that now holds its share lifts the fence.
	Fenced bool
	// Departing: the member is leaving (Leave) and spends no fallback any
	// more. Its answer must not undo a release the leader recorded for its
	// departure: a renewal crossing the leave request would otherwise keep
	// its fraction reserved until it is reaped.
	Departing bool
}

type leaseReq struct {
	Key     string
	Holder  string // the asking node's id: the leader caps what one node holds
	Count   int
	MaxWait time.Duration
}

type leaseResp struct {
	Code  uint8
	Lease lease
	Wait  time.Duration // the would-be wait for codeLimitExceeded
	Msg   string
}

// codeFor maps an error to the code a remote node turns back into the same
// sentinel.
func codeFor(err error) uint8 {
	switch {
	case err == nil:
		return codeOK
	case errors.Is(err, errNotLeader):
		return codeNotLeader
	case errors.Is(err, raftpace.ErrLimitExceeded):
		return codeLimitExceeded
	case errors.Is(err, raftpace.ErrUnknownKey):
		return codeUnknownKey
	case errors.Is(err, raftpace.ErrInvalidRequest):
		return codeInvalid
	default:
		return codeUnavailable
	}
}

// errFor is codeFor's inverse; msg is the remote's text.
func errFor(code uint8, msg string) error {
	switch code {
	case codeOK:
		return nil
	case codeNotLeader:
		return errNotLeader
	case codeLimitExceeded:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrLimitExceeded, msg)
	case codeUnknownKey:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrUnknownKey, msg)
	case codeInvalid:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrInvalidRequest, msg)
	default:
		return fmt.Errorf("node: leader: %s", msg)
	}
}

// --- encoding -------------------------------------------------------------

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errBadRPC
	}
}

func (r *reader) byte() uint8 {
	if r.err != nil || len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string(maxLen int) string {
	n := r.uvarint()
	if r.err != nil || n > uint64(maxLen) || n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// bool reads one byte that must be 0 or 1.
func (r *reader) bool() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail()
	return false
}

func (r *reader) float64() float64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// start checks the version byte; done checks nothing is left over.
func (r *reader) start() {
	if v := r.byte(); r.err == nil && v != rpcVersion {
		r.err = fmt.Errorf("%w: version %d, want %d", errBadRPC, v, rpcVersion)
	}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", errBadRPC, len(r.b))
	}
	return r.err
}

const maxMsgLen = 4096

func (m reserveReq) encode() []byte {
	b := make([]byte, 0, 16+len(m.Key))
	b = append(b, rpcVersion)
	b = appendString(b, m.Key)
	b = binary.AppendUvarint(b, uint64(m.Count))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func decodeReserveReq(b []byte) (reserveReq, error) {
	r := reader{b: b}
	r.start()
	m := reserveReq{Key: r.string(fsm.MaxKeyLen)}
	count := r.uvarint()
	m.MaxWait = time.Duration(r.varint())
	if err := r.done(); err != nil {
		return reserveReq{}, err
	}
	if count < 1 || count > math.MaxInt32 {
		return reserveReq{}, fmt.Errorf("%w: count %d", errBadRPC, count)
	}
	m.Count = int(count)
	return m, nil
}

func (m reserveResp) encode() []byte {
	b := []byte{rpcVersion, m.Code}
	b = binary.AppendVarint(b, int64(m.Wait))
	b = binary.AppendVarint(b, int64(m.Held))
	return appendString(b, m.Msg)
}

func decodeReserveResp(b []byte) (reserveResp, error) {
	r := reader{b: b}
	r.start()
	m := reserveResp{Code: r.byte(), Wait: time.Duration(r.varint()), Held: time.Duration(r.varint()), Msg: r.string(maxMsgLen)}
	if err := r.done(); err != nil {
		return reserveResp{}, err
	}
	if m.Held < 0 {
		return reserveResp{}, fmt.Errorf("%w: reserve answer held %v", errBadRPC, m.Held)
	}
	return m, nil
}

func (m setLimitReq) encode() []byte {
	b := []byte{rpcVersion}
	b = appendString(b, m.Key)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Limit.Rate))
	return binary.AppendUvarint(b, uint64(m.Limit.Burst))
}

func decodeSetLimitReq(b []byte) (setLimitReq, error) {
	r := reader{b: b}
	r.start()
	m := setLimitReq{Key: r.string(fsm.MaxKeyLen)}
	m.Limit.Rate = r.float64()
	burst := r.uvarint()
	if err := r.done(); err != nil {
		return setLimitReq{}, err
	}
	if burst > math.MaxInt32 {
		return setLimitReq{}, fmt.Errorf("%w: burst %d", errBadRPC, burst)
	}
	m.Limit.Burst = int(burst)
	return m, nil
}

func (m indexResp) encode() []byte {
	b := []byte{rpcVersion, m.Code}
	b = binary.AppendUvarint(b, m.Index)
	return appendString(b, m.Msg)
}

func decodeIndexResp(b []byte) (indexResp, error) {
	r := reader{b: b}
	r.start()
	m := indexResp{Code: r.byte(), Index: r.uvarint(), Msg: r.string(maxMsgLen)}
	return m, r.done()
}

func (m removeServerReq) encode() []byte {
	b := appendString([]byte{rpcVersion}, m.ID)
	return binary.AppendVarint(b, int64(m.Busy))
}

func decodeRemoveServerReq(b []byte) (removeServerReq, error) {
	r := reader{b: b}
	r.start()
	m := removeServerReq{ID: r.string(fsm.MaxIDLen), Busy: time.Duration(r.varint())}
	if err := r.done(); err != nil {
		return removeServerReq{}, err
	}
	if m.Busy < 0 || m.Busy > maxBusy {
		return removeServerReq{}, fmt.Errorf("%w: leave busy %v: must be 0..%v", errBadRPC, m.Busy, maxBusy)
	}
	return m, nil
}

// maxBusy bounds a member's reported fallback reach: its local slots lie
// at most FallbackFor (at most 24h) ahead.
const maxBusy = 25 * time.Hour

// errMsg is the text of err for an answer's Msg field ("" for nil),
// truncated to maxMsgLen.
func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return truncate(err.Error(), maxMsgLen)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (m leaseReq) encode() []byte {
	b := make([]byte, 0, 24+len(m.Key)+len(m.Holder))
	b = append(b, rpcVersion)
	b = appendString(b, m.Key)
	b = appendString(b, m.Holder)
	b = binary.AppendUvarint(b, uint64(m.Count))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func decodeLeaseReq(b []byte) (leaseReq, error) {
	r := reader{b: b}
	r.start()
	m := leaseReq{Key: r.string(fsm.MaxKeyLen), Holder: r.string(fsm.MaxIDLen)}
	count := r.uvarint()
	m.MaxWait = time.Duration(r.varint())
	if err := r.done(); err != nil {
		return leaseReq{}, err
	}
	if count < 1 || count > math.MaxInt32 {
		return leaseReq{}, fmt.Errorf("%w: count %d", errBadRPC, count)
	}
	m.Count = int(count)
	return m, nil
}

func (m leaseResp) encode() []byte {
	b := make([]byte, 0, 32+len(m.Msg))
	b = append(b, rpcVersion, m.Code)
	b = binary.AppendVarint(b, m.Lease.Base)
	b = binary.AppendVarint(b, m.Lease.Spacing)
	b = binary.AppendUvarint(b, uint64(m.Lease.Count))
	b = binary.AppendVarint(b, m.Lease.Held)
	b = binary.AppendVarint(b, int64(m.Wait))
	return appendString(b, m.Msg)
}

func decodeLeaseResp(b []byte) (leaseResp, error) {
	r := reader{b: b}
	r.start()
	m := leaseResp{Code: r.byte()}
	m.Lease.Base = r.varint()
	m.Lease.Spacing = r.varint()
	count := r.uvarint()
	m.Lease.Held = r.varint()
	m.Wait = time.Duration(r.varint())
	m.Msg = r.string(maxMsgLen)
	if err := r.done(); err != nil {
		return leaseResp{}, err
	}
	if count > math.MaxInt32 {
		return leaseResp{}, fmt.Errorf("%w: count %d", errBadRPC, count)
	}
	m.Lease.Count = int(count)
	// A granted lease must describe real slots: a hostile or corrupt answer
	// must not make a node divide by zero or serve slots at once.
	if m.Code == codeOK && (m.Lease.Count < 1 || m.Lease.Spacing < 1 || m.Lease.Held < 0) {
		return leaseResp{}, fmt.Errorf("%w: lease of %d slots spaced %dns held %dns", errBadRPC, m.Lease.Count, m.Lease.Spacing, m.Lease.Held)
	}
	return m, nil
}

func (m shareReq) encode() []byte { return appendString([]byte{rpcVersion}, m.Leader) }

func decodeShareReq(b []byte) (shareReq, error) {
	r := reader{b: b}
	r.start()
	m := shareReq{Leader: r.string(fsm.MaxIDLen)}
	return m, r.done()
}

func (m shareAnswer) encode() []byte {
	b := []byte{rpcVersion}
	b = binary.AppendUvarint(b, m.Applied)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Fraction))
	b = binary.AppendVarint(b, int64(m.Busy))
	b = appendBool(b, m.Fenced)
	return appendBool(b, m.Departing)
}

func decodeShareAnswer(b []byte) (shareAnswer, error) {
	r := reader{b: b}
	r.start()
	m := shareAnswer{Applied: r.uvarint(), Fraction: r.float64(), Busy: time.Duration(r.varint()), Fenced: r.bool(), Departing: r.bool()}
	if err := r.done(); err != nil {
		return shareAnswer{}, err
	}
	if math.IsNaN(m.Fraction) || m.Fraction < 0 || m.Fraction > 1 || m.Busy < 0 {
		return shareAnswer{}, fmt.Errorf("%w: share answer fraction %v busy %v", errBadRPC, m.Fraction, m.Busy)
	}
	return m, nil
}
