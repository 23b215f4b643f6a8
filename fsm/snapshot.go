package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

const (
	snapshotMagic   = "RPSN"
	snapshotVersion = 2        // the version Snapshot writes while no limit is in dry run
	snapshotV1      = 1        // no pauses, caps or slots; Restore still reads it
	snapshotV3      = 3        // version 2 with a DryRun byte per limit; written only when one is
	snapshotV4      = 4        // version 3 with a quota per limit and the quota counts; written only when there is one
	snapshotChunk   = 64 << 10 // bytes buffered between writes to the sink

	// maxSnapshotEntry bounds the encoding of the largest entry (a slot), by
	// which the buffer may overrun snapshotChunk before it is flushed.
	maxSnapshotEntry = 4*binary.MaxVarintLen64 + 2*MaxIDLen + MaxSlotKeys*(binary.MaxVarintLen64+MaxKeyLen)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxSnapshotRead is MaxSnapshotSize; a variable so tests can lower it.
var maxSnapshotRead = MaxSnapshotSize

// Snapshot is a point-in-time copy of a State, taken by State.Snapshot. It
// implements raft.FSMSnapshot. Its methods are safe for concurrent use.
type Snapshot struct {
	applied  uint64
	limits   []keyLimit
	horizons []keyHorizon
	members  []Member
	pauses   []keyPause
	caps     []keyCap
	slots    []HeldSlot
	quotas   []QuotaEntry

	sortOnce sync.Once
}

type keyLimit struct {
	key   string
	limit Limit
}

type keyHorizon struct {
	key   string
	ahead time.Duration
}

type keyPause struct {
	key   string
	pause time.Duration
}

type keyCap struct {
	key string
	max int
}

var _ raft.FSMSnapshot = (*Snapshot)(nil)

// Snapshot copies the state under the lock and returns it; encoding and
// sorting happen later, in Persist or WriteTo, outside the lock.
func (s *State) Snapshot() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := &Snapshot{
		applied:  s.applied,
		limits:   make([]keyLimit, 0, len(s.limits)),
		horizons: make([]keyHorizon, 0, len(s.horizons)),
		members:  make([]Member, 0, len(s.members)),
		pauses:   make([]keyPause, 0, len(s.pauses)),
		caps:     make([]keyCap, 0, len(s.caps)),
		slots:    make([]HeldSlot, 0, len(s.slots)),
		quotas:   make([]QuotaEntry, 0, len(s.quotas)),
	}
	for k, c := range s.quotas {
		p.quotas = append(p.quotas, QuotaEntry{k, c})
	}
	for k, l := range s.limits {
		p.limits = append(p.limits, keyLimit{k, l})
	}
	for k, d := range s.horizons {
		p.horizons = append(p.horizons, keyHorizon{k, d})
	}
	for _, m := range s.members {
		p.members = append(p.members, m)
	}
	for k, d := range s.pauses {
		p.pauses = append(p.pauses, keyPause{k, d})
	}
	for k, n := range s.caps {
		p.caps = append(p.caps, keyCap{k, n})
	}
	for id, sl := range s.slots {
		// The state never modifies a stored Keys slice, so sharing it is
		// safe and keeps the copy under the lock short.
		p.slots = append(p.slots, HeldSlot{ID: id, Slot: sl})
	}
	return p
}

// AppliedIndex returns the applied index of the State when the snapshot was
// taken.
func (p *Snapshot) AppliedIndex() uint64 { return p.applied }

func (p *Snapshot) sort() {
	p.sortOnce.Do(func() {
		slices.SortFunc(p.limits, func(a, b keyLimit) int { return strings.Compare(a.key, b.key) })
		slices.SortFunc(p.horizons, func(a, b keyHorizon) int { return strings.Compare(a.key, b.key) })
		slices.SortFunc(p.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
		slices.SortFunc(p.pauses, func(a, b keyPause) int { return strings.Compare(a.key, b.key) })
		slices.SortFunc(p.caps, func(a, b keyCap) int { return strings.Compare(a.key, b.key) })
		slices.SortFunc(p.slots, func(a, b HeldSlot) int { return strings.Compare(a.ID, b.ID) })
		slices.SortFunc(p.quotas, func(a, b QuotaEntry) int { return strings.Compare(a.Key, b.Key) })
	})
}

// Persist writes the snapshot encoding (see the package doc) to sink and
// closes it. On any error it calls sink.Cancel instead and returns the
// error.
func (p *Snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := p.WriteTo(sink); err != nil {
		if cerr := sink.Cancel(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cancel sink: %w", cerr))
		}
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("fsm: persist snapshot: close sink: %w", err)
	}
	return nil
}

// Release does nothing: a Snapshot holds only memory.
func (p *Snapshot) Release() {}

// WriteTo writes the snapshot encoding to w and returns the number of
// bytes written: version 2, or version 3 when some limit is in dry run (so
// a build that knows no dry runs restores the snapshots of a cluster that
// uses none). Equal states give identical bytes.
func (p *Snapshot) WriteTo(w io.Writer) (int64, error) {
	p.sort()
	version := byte(snapshotVersion)
	if slices.ContainsFunc(p.limits, func(kl keyLimit) bool { return kl.limit.DryRun }) {
		version = snapshotV3
	}
	if len(p.quotas) > 0 || slices.ContainsFunc(p.limits, func(kl keyLimit) bool { return kl.limit.Quota != 0 }) {
		version = snapshotV4
	}
	e := &snapshotWriter{w: w, buf: make([]byte, 0, min(p.sizeHint(), snapshotChunk+maxSnapshotEntry))}
	e.buf = append(e.buf, snapshotMagic...)
	e.buf = append(e.buf, version)
	e.buf = binary.AppendUvarint(e.buf, p.applied)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.limits)))
	for _, kl := range p.limits {
		e.buf = appendString(e.buf, kl.key)
		e.buf = appendFloat(e.buf, kl.limit.Rate)
		e.buf = binary.AppendVarint(e.buf, int64(kl.limit.Burst))
		switch version {
		case snapshotV3:
			var dry byte
			if kl.limit.DryRun {
				dry = 1
			}
			e.buf = append(e.buf, dry)
		case snapshotV4:
			e.buf = appendQuota(e.buf, kl.limit)
		}
		e.maybeFlush()
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.horizons)))
	for _, kh := range p.horizons {
		e.buf = appendString(e.buf, kh.key)
		e.buf = binary.AppendVarint(e.buf, int64(kh.ahead))
		e.maybeFlush()
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.members)))
	for _, m := range p.members {
		e.buf = appendMember(e.buf, m)
		e.maybeFlush()
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.pauses)))
	for _, kp := range p.pauses {
		e.buf = appendString(e.buf, kp.key)
		e.buf = binary.AppendVarint(e.buf, int64(kp.pause))
		e.maybeFlush()
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.caps)))
	for _, kc := range p.caps {
		e.buf = appendString(e.buf, kc.key)
		e.buf = binary.AppendVarint(e.buf, int64(kc.max))
		e.maybeFlush()
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(p.slots)))
	for _, hs := range p.slots {
		e.buf = appendSlot(e.buf, hs.ID, hs.Slot)
		e.maybeFlush()
	}
	if version == snapshotV4 {
		e.buf = binary.AppendUvarint(e.buf, uint64(len(p.quotas)))
		for _, q := range p.quotas {
			e.buf = appendString(e.buf, q.Key)
			e.buf = appendQuotaCount(e.buf, q.QuotaCount)
			e.maybeFlush()
		}
	}
	e.flush()
	if e.err == nil {
		var trailer [4]byte
		binary.BigEndian.PutUint32(trailer[:], e.crc)
		e.buf = append(e.buf, trailer[:]...)
		e.write()
	}
	return e.n, e.err
}

// sizeHint is an upper bound on the encoded size of p, to size the first
// buffer.
func (p *Snapshot) sizeHint() int {
	const varint = binary.MaxVarintLen64
	n := len(snapshotMagic) + 1 + 7*varint + 4
	for _, kl := range p.limits {
		n += varint + len(kl.key) + 8 + 2*varint + 3
	}
	for _, q := range p.quotas {
		n += varint + len(q.Key) + 1 + 2*varint
	}
	for _, kh := range p.horizons {
		n += varint + len(kh.key) + varint
	}
	for _, m := range p.members {
		n += 2*varint + len(m.ID) + len(m.Addr) + 8
	}
	for _, kp := range p.pauses {
		n += varint + len(kp.key) + varint
	}
	for _, kc := range p.caps {
		n += varint + len(kc.key) + varint
	}
	for _, hs := range p.slots {
		n += slotSize(hs.ID, hs.Slot)
	}
	return n
}

// snapshotWriter buffers the encoding, feeds it to the checksum and writes
// it in chunks.
type snapshotWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	n   int64
	err error
}

func (e *snapshotWriter) maybeFlush() {
	if len(e.buf) >= snapshotChunk {
		e.flush()
	}
}

// flush checksums and writes the buffer.
func (e *snapshotWriter) flush() {
	e.crc = crc32.Update(e.crc, castagnoli, e.buf)
	e.write()
}

// write writes the buffer without checksumming it.
func (e *snapshotWriter) write() {
	if e.err == nil && len(e.buf) > 0 {
		var n int
		n, e.err = e.w.Write(e.buf)
		e.n += int64(n)
		if e.err == nil && n != len(e.buf) {
			e.err = io.ErrShortWrite
		}
	}
	e.buf = e.buf[:0]
}

// Restore replaces all of the state (limits, horizons, members, pauses,
// caps, slots and applied index) with the snapshot read from r, which must
// be the exact output of Snapshot.WriteTo or Persist and no larger than
// MaxSnapshotSize bytes.
//
// It also reads version-1 snapshots, written before pauses, caps and slots
// existed: they restore with none of those. Snapshot writes version 2 only,
// so a build that reads only version 1 cannot restore its snapshots.
//
// A snapshot that is not valid (bad magic or version, checksum mismatch,
// truncation, trailing bytes, an invalid or out-of-order entry) gives an
// error wrapping ErrInvalidSnapshot; an error reading r is returned
// wrapped. Either way the state is unchanged: Restore decodes into new
// maps and swaps them in only when the whole snapshot is good.
//
// The node treats every horizon, pause and slot of a restored snapshot as
// applied at the moment of restore.
func (s *State) Restore(r io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(r, int64(maxSnapshotRead)+1))
	if err != nil {
		return fmt.Errorf("fsm: restore: read snapshot: %w", err)
	}
	n, err := decodeSnapshot(data)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied, s.limits, s.horizons, s.members = n.applied, n.limits, n.horizons, n.members
	s.pauses, s.caps, s.slots, s.quotas = n.pauses, n.caps, n.slots, n.quotas
	s.indexTemplates()
	return nil
}
