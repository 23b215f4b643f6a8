package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

type ReserveReq struct {
	Key     string
	Count   int
	MaxWait time.Duration
}

type ReserveResp struct {
	Code uint8
	Wait time.Duration // the grant's wait, or the would-be wait for CodeLimitExceeded
	Held time.Duration // how long the leader held the request before the grant
	Msg  string
}

type SetLimitReq struct {
	Key   string
	Limit fsm.Limit
}

// IndexResp answers requests that commit something: the raft index to wait
// for before a read on the asking node reflects the change.
type IndexResp struct {
	Code  uint8
	Index uint64
	Msg   string
}

// RemoveServerReq: member ID leaves. Busy is how far past the request its
// own fallback slots (and pool grants counting its fraction) still reach;
// the leader counts its fraction from the request's arrival plus Busy.
type RemoveServerReq struct {
	ID   string
	Busy time.Duration
}

type ShareReq struct{ Leader string }

// ShareOverrun is how far past the reach of the shares it counted a
// leader's grant paced at interval may claim the rate, and so how long a
// member that enters fallback leaves each key of that interval alone
// (node/DESIGN.md, "Slow keys"). Both sides derive it from ShareTTL.
//
// A grant at slot t paced at interval T claims the rate over [t, t+T):
// the leader needs the shares it counts for all of it, but a share
// reaches only about ShareTTL ahead, so a key slower than that could
// never be granted (a key at 0.5/s on one node never was). So the leader
// needs the shares for all but ShareOverrun of the claim, and a member
// whose lapsed share the claim may run into starts each key's fallback
// pacing ShareOverrun of its own interval (never shorter than the
// leader's: f_i <= F while i's share is held) after its promise ended.
// At intervals up to ShareTTL/3 it is 0: nothing changes for them.
func ShareOverrun(interval, shareTTL time.Duration) time.Duration {
	return max(0, interval-shareTTL/3)
}

// ShareAnswer is a member's answer to a renewal: it applies Fraction as of
// raft index Applied, and its fallback slots reach Busy past the answer.
type ShareAnswer struct {
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

type LeaseReq struct {
	Key     string
	Holder  string // the asking node's id: the leader caps what one node holds
	Count   int
	MaxWait time.Duration
}

type LeaseResp struct {
	Code  uint8
	Lease Lease
	Wait  time.Duration // the would-be wait for CodeLimitExceeded
	Msg   string
}

func (m ReserveReq) Encode() []byte {
	b := make([]byte, 0, 16+len(m.Key))
	b = append(b, Version)
	b = appendString(b, m.Key)
	b = binary.AppendUvarint(b, uint64(m.Count))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func DecodeReserveReq(b []byte) (ReserveReq, error) {
	r := reader{b: b}
	r.start()
	m := ReserveReq{Key: r.string(fsm.MaxKeyLen)}
	count := r.uvarint()
	m.MaxWait = time.Duration(r.varint())
	if err := r.done(); err != nil {
		return ReserveReq{}, err
	}
	if count < 1 || count > math.MaxInt32 {
		return ReserveReq{}, fmt.Errorf("%w: count %d", ErrBadRPC, count)
	}
	m.Count = int(count)
	return m, nil
}

func (m ReserveResp) Encode() []byte {
	b := []byte{Version, m.Code}
	b = binary.AppendVarint(b, int64(m.Wait))
	b = binary.AppendVarint(b, int64(m.Held))
	return appendString(b, m.Msg)
}

func DecodeReserveResp(b []byte) (ReserveResp, error) {
	r := reader{b: b}
	r.start()
	m := ReserveResp{Code: r.byte(), Wait: time.Duration(r.varint()), Held: time.Duration(r.varint()), Msg: r.string(MaxMsgLen)}
	if err := r.done(); err != nil {
		return ReserveResp{}, err
	}
	if m.Held < 0 {
		return ReserveResp{}, fmt.Errorf("%w: reserve answer held %v", ErrBadRPC, m.Held)
	}
	return m, nil
}

// Encode ends with a byte 1 only for a limit in dry run, so a leader of a
// build without dry runs refuses it (trailing bytes) rather than enforce it.
func (m SetLimitReq) Encode() []byte {
	b := []byte{Version}
	b = appendString(b, m.Key)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Limit.Rate))
	b = binary.AppendUvarint(b, uint64(m.Limit.Burst))
	if m.Limit.DryRun {
		b = append(b, 1)
	}
	return b
}

func DecodeSetLimitReq(b []byte) (SetLimitReq, error) {
	r := reader{b: b}
	r.start()
	m := SetLimitReq{Key: r.string(fsm.MaxKeyLen)}
	m.Limit.Rate = r.float64()
	burst := r.uvarint()
	if r.err == nil && len(r.b) > 0 {
		m.Limit.DryRun = r.byte() == 1 // the only value written
		if !m.Limit.DryRun {
			r.fail()
		}
	}
	if err := r.done(); err != nil {
		return SetLimitReq{}, err
	}
	if burst > math.MaxInt32 {
		return SetLimitReq{}, fmt.Errorf("%w: burst %d", ErrBadRPC, burst)
	}
	m.Limit.Burst = int(burst)
	return m, nil
}

func (m IndexResp) Encode() []byte {
	b := []byte{Version, m.Code}
	b = binary.AppendUvarint(b, m.Index)
	return appendString(b, m.Msg)
}

func DecodeIndexResp(b []byte) (IndexResp, error) {
	r := reader{b: b}
	r.start()
	m := IndexResp{Code: r.byte(), Index: r.uvarint(), Msg: r.string(MaxMsgLen)}
	return m, r.done()
}

func (m RemoveServerReq) Encode() []byte {
	b := appendString([]byte{Version}, m.ID)
	return binary.AppendVarint(b, int64(m.Busy))
}

func DecodeRemoveServerReq(b []byte) (RemoveServerReq, error) {
	r := reader{b: b}
	r.start()
	m := RemoveServerReq{ID: r.string(fsm.MaxIDLen), Busy: time.Duration(r.varint())}
	if err := r.done(); err != nil {
		return RemoveServerReq{}, err
	}
	if m.Busy < 0 || m.Busy > MaxBusy {
		return RemoveServerReq{}, fmt.Errorf("%w: leave busy %v: must be 0..%v", ErrBadRPC, m.Busy, MaxBusy)
	}
	return m, nil
}

func (m LeaseReq) Encode() []byte {
	b := make([]byte, 0, 24+len(m.Key)+len(m.Holder))
	b = append(b, Version)
	b = appendString(b, m.Key)
	b = appendString(b, m.Holder)
	b = binary.AppendUvarint(b, uint64(m.Count))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func DecodeLeaseReq(b []byte) (LeaseReq, error) {
	r := reader{b: b}
	r.start()
	m := LeaseReq{Key: r.string(fsm.MaxKeyLen), Holder: r.string(fsm.MaxIDLen)}
	count := r.uvarint()
	m.MaxWait = time.Duration(r.varint())
	if err := r.done(); err != nil {
		return LeaseReq{}, err
	}
	if count < 1 || count > math.MaxInt32 {
		return LeaseReq{}, fmt.Errorf("%w: count %d", ErrBadRPC, count)
	}
	m.Count = int(count)
	return m, nil
}

func (m LeaseResp) Encode() []byte {
	b := make([]byte, 0, 32+len(m.Msg))
	b = append(b, Version, m.Code)
	b = binary.AppendVarint(b, m.Lease.Base)
	b = binary.AppendVarint(b, m.Lease.Spacing)
	b = binary.AppendUvarint(b, uint64(m.Lease.Count))
	b = binary.AppendVarint(b, m.Lease.Held)
	b = binary.AppendVarint(b, int64(m.Wait))
	return appendString(b, m.Msg)
}

func DecodeLeaseResp(b []byte) (LeaseResp, error) {
	r := reader{b: b}
	r.start()
	m := LeaseResp{Code: r.byte()}
	m.Lease.Base = r.varint()
	m.Lease.Spacing = r.varint()
	count := r.uvarint()
	m.Lease.Held = r.varint()
	m.Wait = time.Duration(r.varint())
	m.Msg = r.string(MaxMsgLen)
	if err := r.done(); err != nil {
		return LeaseResp{}, err
	}
	if count > math.MaxInt32 {
		return LeaseResp{}, fmt.Errorf("%w: count %d", ErrBadRPC, count)
	}
	m.Lease.Count = int(count)
	// A granted lease must describe real slots: a hostile or corrupt answer
	// must not make a node divide by zero or serve slots at once.
	if m.Code == CodeOK && (m.Lease.Count < 1 || m.Lease.Spacing < 1 || m.Lease.Held < 0) {
		return LeaseResp{}, fmt.Errorf("%w: lease of %d slots spaced %dns held %dns", ErrBadRPC, m.Lease.Count, m.Lease.Spacing, m.Lease.Held)
	}
	return m, nil
}

func (m ShareReq) Encode() []byte { return appendString([]byte{Version}, m.Leader) }

func DecodeShareReq(b []byte) (ShareReq, error) {
	r := reader{b: b}
	r.start()
	m := ShareReq{Leader: r.string(fsm.MaxIDLen)}
	return m, r.done()
}

func (m ShareAnswer) Encode() []byte {
	b := []byte{Version}
	b = binary.AppendUvarint(b, m.Applied)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Fraction))
	b = binary.AppendVarint(b, int64(m.Busy))
	b = appendBool(b, m.Fenced)
	return appendBool(b, m.Departing)
}

func DecodeShareAnswer(b []byte) (ShareAnswer, error) {
	r := reader{b: b}
	r.start()
	m := ShareAnswer{Applied: r.uvarint(), Fraction: r.float64(), Busy: time.Duration(r.varint()), Fenced: r.bool(), Departing: r.bool()}
	if err := r.done(); err != nil {
		return ShareAnswer{}, err
	}
	if math.IsNaN(m.Fraction) || m.Fraction < 0 || m.Fraction > 1 || m.Busy < 0 {
		return ShareAnswer{}, fmt.Errorf("%w: share answer fraction %v busy %v", ErrBadRPC, m.Fraction, m.Busy)
	}
	return m, nil
}

// Lease is a run of slots granted at once: slot i (0 <= i < Count) may be
// used at Base + i*Spacing after the grant, or at the grant if that is
// negative (slots the burst allows at once).
type Lease struct {
	Base    int64 // ns relative to the grant; negative while burst remains
	Spacing int64 // ns between slots: the key's emission interval
	Count   int
	// Held is how long the leader held the request before it granted
	// (ns): the grant is at least that long after the request was sent.
	Held int64
}

// Slot returns slot i's offset from the grant.
func (l Lease) Slot(i int) int64 { return max(0, l.Base+int64(i)*l.Spacing) }
