package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// ReserveReq asks for every want at one instant, or none (ReserveAll); a
// reservation of one key is the list of one.
type ReserveReq struct {
	Wants   []raftpace.Want
	MaxWait time.Duration
}

type ReserveResp struct {
	Code uint8
	Wait time.Duration // the grant's wait, or the would-be wait for CodeLimitExceeded
	Held time.Duration // how long the leader held the request before the grant
	Msg  string
	// Key names the key a refusal (CodeLimitExceeded, CodePaused) is
	// about, when the request named several.
	Key string
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

// Encode writes the first want, the maximum wait and then, only when there
// are more, their count and each: a reservation of one key is the bytes it
// always was, and a leader of a build without ReserveAll refuses a longer
// one (trailing bytes) rather than grant its first key alone.
func (m ReserveReq) Encode() []byte {
	b := make([]byte, 0, 16+len(m.Wants)*24)
	b = append(b, Version)
	if len(m.Wants) == 0 {
		m.Wants = []raftpace.Want{{}} // refused by the decoder (count 0)
	}
	b = appendWant(b, m.Wants[0])
	b = binary.AppendVarint(b, int64(m.MaxWait))
	if more := m.Wants[1:]; len(more) > 0 {
		b = binary.AppendUvarint(b, uint64(len(more)))
		for _, w := range more {
			b = appendWant(b, w)
		}
	}
	return b
}

func appendWant(b []byte, w raftpace.Want) []byte {
	b = appendString(b, w.Key)
	return binary.AppendUvarint(b, uint64(max(w.Count, 0)))
}

func (r *reader) want() raftpace.Want {
	w := raftpace.Want{Key: r.string(fsm.MaxKeyLen)}
	count := r.uvarint()
	if count < 1 || count > math.MaxInt32 {
		r.fail()
		return raftpace.Want{}
	}
	w.Count = int(count)
	return w
}

func DecodeReserveReq(b []byte) (ReserveReq, error) {
	r := reader{b: b}
	r.start()
	m := ReserveReq{Wants: []raftpace.Want{r.want()}}
	m.MaxWait = time.Duration(r.varint())
	if r.err == nil && len(r.b) > 0 {
		more := r.uvarint()
		if more < 1 || more >= raftpace.MaxWants {
			r.fail()
		}
		for i := uint64(0); r.err == nil && i < more; i++ {
			m.Wants = append(m.Wants, r.want())
		}
	}
	if err := r.done(); err != nil {
		return ReserveReq{}, err
	}
	return m, nil
}

// Encode ends with the key only when one is named (a refusal of a
// reservation of several keys), so other answers are the bytes they were.
func (m ReserveResp) Encode() []byte {
	b := []byte{Version, m.Code}
	b = binary.AppendVarint(b, int64(m.Wait))
	b = binary.AppendVarint(b, int64(m.Held))
	b = appendString(b, m.Msg)
	if m.Key != "" {
		b = appendString(b, m.Key)
	}
	return b
}

func DecodeReserveResp(b []byte) (ReserveResp, error) {
	r := reader{b: b}
	r.start()
	m := ReserveResp{Code: r.byte(), Wait: time.Duration(r.varint()), Held: time.Duration(r.varint()), Msg: r.string(MaxMsgLen)}
	if r.err == nil && len(r.b) > 0 {
		if m.Key = r.string(fsm.MaxKeyLen); m.Key == "" {
			r.fail()
		}
	}
	if err := r.done(); err != nil {
		return ReserveResp{}, err
	}
	if m.Held < 0 {
		return ReserveResp{}, fmt.Errorf("%w: reserve answer held %v", ErrBadRPC, m.Held)
	}
	return m, nil
}

// Encode ends with a byte 1 only for a limit in dry run, so a leader of a
// build without dry runs refuses it (trailing bytes) rather than enforce it;
// a limit with a quota then adds Quota and Per (after a dry-run byte of 0 or
// 1), which a build without quotas refuses the same way.
func (m SetLimitReq) Encode() []byte {
	b := []byte{Version}
	b = appendString(b, m.Key)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Limit.Rate))
	b = binary.AppendUvarint(b, uint64(m.Limit.Burst))
	if m.Limit.DryRun || m.Limit.Quota != 0 {
		var dry byte
		if m.Limit.DryRun {
			dry = 1
		}
		b = append(b, dry)
	}
	if m.Limit.Quota != 0 {
		b = binary.AppendUvarint(b, uint64(m.Limit.Quota))
		b = append(b, byte(m.Limit.Per))
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
		dry := r.byte()
		m.Limit.DryRun = dry == 1
		if r.err == nil && len(r.b) > 0 {
			quota := r.uvarint()
			m.Limit.Per = fsm.Period(r.byte())
			if quota < 1 || quota > fsm.MaxQuota {
				r.fail()
			}
			m.Limit.Quota = int64(quota)
		} else if dry != 1 {
			r.fail() // a byte 0 without a quota is not canonical
		}
		if dry > 1 {
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
	m := readLeaseResp(&r)
	if err := r.done(); err != nil {
		return LeaseResp{}, err
	}
	if err := m.check(); err != nil {
		return LeaseResp{}, err
	}
	return m, nil
}

// readLeaseResp reads a LeaseResp after its version byte (alone, or as
// one answer of a LeasesResp).
func readLeaseResp(r *reader) LeaseResp {
	m := LeaseResp{Code: r.byte()}
	m.Lease.Base = r.varint()
	m.Lease.Spacing = r.varint()
	count := r.uvarint()
	m.Lease.Held = r.varint()
	m.Wait = time.Duration(r.varint())
	m.Msg = r.string(MaxMsgLen)
	if count > math.MaxInt32 {
		r.fail()
		return LeaseResp{}
	}
	m.Lease.Count = int(count)
	return m
}

// check refuses a granted lease that describes no real slots: a hostile
// or corrupt answer must not make a node divide by zero or serve slots
// at once.
func (m LeaseResp) check() error {
	if m.Code == CodeOK && (m.Lease.Count < 1 || m.Lease.Spacing < 1 || m.Lease.Held < 0) {
		return fmt.Errorf("%w: lease of %d slots spaced %dns held %dns", ErrBadRPC, m.Lease.Count, m.Lease.Spacing, m.Lease.Held)
	}
	return nil
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

// Restated returns the lease as stated d after its grant, by the side
// that granted it (whose clock measured d): its slots d nearer, and d more
// of holding, so the receiver's window for each slot (placed from the
// answer's arrival, used by the request's sending plus Held plus the slot
// plus UseGrace) is measured from when the answer left, not from the
// grant. A grant that waited after it was made (a goroutine descheduled,
// a thousand answers woken together, a GC pause) then costs the receiver
// nothing of its UseGrace.
//
// It never moves the statement past the first slot's time (d is cut to
// Base): Slot clamps a negative offset to "at once" (a burst's slots), so
// a slot restated past its time would read as due at the restatement and
// be used by a UseGrace after it, later than it may be used.
func (l Lease) Restated(d int64) Lease {
	d = min(max(d, 0), max(l.Base, 0))
	l.Base -= d
	l.Held += d
	return l
}

// CheckWants reports what is wrong with the wants of one reservation: 1
// to raftpace.MaxWants keys that may name events, each once, each count
// at least 1. Every entry point checks them here (a node's caller, the
// leader's RPC).
func CheckWants(wants []raftpace.Want) error {
	if len(wants) == 0 || len(wants) > raftpace.MaxWants {
		return fmt.Errorf("%d keys: a reservation names 1 to %d", len(wants), raftpace.MaxWants)
	}
	for i, w := range wants {
		if err := fsm.ValidateEventKey(w.Key); err != nil {
			return err
		}
		if w.Count < 1 {
			return fmt.Errorf("key %q: count %d must be at least 1", w.Key, w.Count)
		}
		for _, o := range wants[:i] {
			if o.Key == w.Key {
				return fmt.Errorf("key %q named twice: ask for its events together (a count of %d)", w.Key, o.Count+w.Count)
			}
		}
	}
	return nil
}
