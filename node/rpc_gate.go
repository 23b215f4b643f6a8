package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// RPCs of the refusal gate and the concurrency caps (gate.go, slots.go).
const (
	rpcPause        uint8 = 6  // any node -> leader: record a pause (atomic maximum)
	rpcAcquireSlots uint8 = 7  // any node -> leader: take slots, waiting for room
	rpcReleaseSlots uint8 = 8  // any node -> leader: give slots back
	rpcSetCap       uint8 = 9  // any node -> leader: set (Max > 0) or delete (0) a cap
	rpcSync         uint8 = 10 // any node -> leader: the index to apply to read as fresh as the leader

	// codeConcurrency: a cap stayed full for the request's wait.
	codeConcurrency uint8 = 16
	// codePaused: the key is paused on the leader (the asking node may not
	// have applied the pause yet); Wait carries the remaining pause.
	codePaused uint8 = 17
)

// errLeaderPaused: the leader refused a grant because the key is paused.
// The node has recorded the pause locally; Reserve checks its gate again.
var errLeaderPaused = errors.New("node: the key is paused on the leader")

// leaderPaused records a pause the leader reported and returns
// errLeaderPaused.
func (n *Node) leaderPaused(key string, remaining time.Duration) error {
	if remaining > 0 {
		now := n.now()
		n.pausedHere.extend(key, now+int64(min(remaining, fsm.MaxPause)), now)
	}
	return fmt.Errorf("%w: %q for another %v", errLeaderPaused, key, remaining)
}

type pauseReq struct {
	Key string
	For time.Duration
}

// pauseResp: Remaining is the pause in force after the request, measured
// by the leader; Index is the entry to wait for (0 when nothing changed).
type pauseResp struct {
	Code      uint8
	Index     uint64
	Remaining time.Duration
	Msg       string
}

type capReq struct {
	Key string
	Max int // 0 deletes the cap
}

type acquireReq struct {
	ID, Holder string
	Keys       []string
	TTL        time.Duration
	MaxWait    time.Duration
}

type acquireResp struct {
	Code uint8
	Full []string // keys whose caps were full, for codeConcurrency
	Msg  string
}

type releaseReq struct{ IDs []string }

func (m pauseReq) encode() []byte {
	b := appendString([]byte{rpcVersion}, m.Key)
	return binary.AppendVarint(b, int64(m.For))
}

func decodePauseReq(b []byte) (pauseReq, error) {
	r := reader{b: b}
	r.start()
	m := pauseReq{Key: r.string(fsm.MaxKeyLen), For: time.Duration(r.varint())}
	return m, r.done()
}

func (m pauseResp) encode() []byte {
	b := []byte{rpcVersion, m.Code}
	b = binary.AppendUvarint(b, m.Index)
	b = binary.AppendVarint(b, int64(m.Remaining))
	return appendString(b, m.Msg)
}

func decodePauseResp(b []byte) (pauseResp, error) {
	r := reader{b: b}
	r.start()
	m := pauseResp{Code: r.byte(), Index: r.uvarint(), Remaining: time.Duration(r.varint()), Msg: r.string(maxMsgLen)}
	return m, r.done()
}

func (m capReq) encode() []byte {
	b := appendString([]byte{rpcVersion}, m.Key)
	return binary.AppendUvarint(b, uint64(m.Max))
}

func decodeCapReq(b []byte) (capReq, error) {
	r := reader{b: b}
	r.start()
	m := capReq{Key: r.string(fsm.MaxKeyLen)}
	max := r.uvarint()
	if err := r.done(); err != nil {
		return capReq{}, err
	}
	if max > fsm.MaxCap {
		return capReq{}, fmt.Errorf("%w: cap %d exceeds %d", errBadRPC, max, fsm.MaxCap)
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

func (m acquireReq) encode() []byte {
	b := []byte{rpcVersion}
	b = appendString(b, m.ID)
	b = appendString(b, m.Holder)
	b = appendStrings(b, m.Keys)
	b = binary.AppendVarint(b, int64(m.TTL))
	return binary.AppendVarint(b, int64(m.MaxWait))
}

func decodeAcquireReq(b []byte) (acquireReq, error) {
	r := reader{b: b}
	r.start()
	m := acquireReq{ID: r.string(fsm.MaxIDLen), Holder: r.string(fsm.MaxIDLen)}
	m.Keys = r.strings(fsm.MaxSlotKeys, fsm.MaxKeyLen)
	m.TTL = time.Duration(r.varint())
	m.MaxWait = time.Duration(r.varint())
	return m, r.done()
}

func (m acquireResp) encode() []byte {
	b := []byte{rpcVersion, m.Code}
	b = appendStrings(b, m.Full)
	return appendString(b, m.Msg)
}

func decodeAcquireResp(b []byte) (acquireResp, error) {
	r := reader{b: b}
	r.start()
	m := acquireResp{Code: r.byte(), Full: r.strings(fsm.MaxSlotKeys, fsm.MaxKeyLen), Msg: r.string(maxMsgLen)}
	return m, r.done()
}

func (m releaseReq) encode() []byte { return appendStrings([]byte{rpcVersion}, m.IDs) }

func decodeReleaseReq(b []byte) (releaseReq, error) {
	r := reader{b: b}
	r.start()
	m := releaseReq{IDs: r.strings(fsm.MaxReleaseIDs, fsm.MaxIDLen)}
	return m, r.done()
}

// handleGateRPC serves pauses, slots and caps on the leader.
func (n *Node) handleGateRPC(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	leading := n.raft.State() == raft.Leader
	switch method {
	case rpcPause:
		m, err := decodePauseReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err == nil && (m.For <= 0 || m.For > fsm.MaxPause) {
			err = fmt.Errorf("pause %v must be in (0, %v]", m.For, fsm.MaxPause)
		}
		if err != nil {
			return pauseResp{Code: codeInvalid, Msg: errMsg(err)}.encode(), nil
		}
		if !leading {
			return pauseResp{Code: codeNotLeader}.encode(), nil
		}
		remaining, index, err := n.leaderPause(m.Key, m.For)
		return pauseResp{Code: codeFor(err), Index: index, Remaining: remaining, Msg: errMsg(err)}.encode(), nil
	case rpcAcquireSlots:
		m, err := decodeAcquireReq(req)
		if err == nil {
			err = fsm.ValidateID(m.ID)
		}
		if err == nil {
			err = fsm.ValidateID(m.Holder)
		}
		if err == nil {
			var keys []string
			keys, err = checkSlotKeys(m.Keys)
			m.Keys = keys
		}
		if err == nil && (m.TTL <= 0 || m.TTL > n.cfg.MaxSlotTTL) {
			err = fmt.Errorf("ttl %v must be in (0, %v] (the leader's MaxSlotTTL)", m.TTL, n.cfg.MaxSlotTTL)
		}
		if err != nil {
			return acquireResp{Code: codeInvalid, Msg: errMsg(err)}.encode(), nil
		}
		if !leading {
			return acquireResp{Code: codeNotLeader}.encode(), nil
		}
		ctx, cancel := context.WithTimeout(ctx, min(max(m.MaxWait, 0), 5*time.Second)+time.Second)
		defer cancel()
		m.MaxWait = min(max(m.MaxWait, 0), 5*time.Second)
		full, err := n.leaderAcquire(ctx, m)
		if errors.Is(err, raftpace.ErrConcurrencyLimit) {
			return acquireResp{Code: codeConcurrency, Full: full, Msg: errMsg(err)}.encode(), nil
		}
		return acquireResp{Code: codeFor(err), Msg: errMsg(err)}.encode(), nil
	case rpcReleaseSlots:
		m, err := decodeReleaseReq(req)
		if err == nil {
			for _, id := range m.IDs {
				if err = fsm.ValidateID(id); err != nil {
					break
				}
			}
		}
		if err != nil {
			return indexResp{Code: codeInvalid, Msg: errMsg(err)}.encode(), nil
		}
		if !leading {
			return indexResp{Code: codeNotLeader}.encode(), nil
		}
		index, err := n.leaderRelease(m.IDs)
		return indexResp{Code: codeFor(err), Index: index, Msg: errMsg(err)}.encode(), nil
	case rpcSync:
		if len(req) != 1 || req[0] != rpcVersion {
			return indexResp{Code: codeInvalid, Msg: "sync: malformed request"}.encode(), nil
		}
		if !leading {
			return indexResp{Code: codeNotLeader}.encode(), nil
		}
		index, err := n.leaderSyncIndex()
		return indexResp{Code: codeFor(err), Index: index, Msg: errMsg(err)}.encode(), nil
	case rpcSetCap:
		m, err := decodeCapReq(req)
		if err == nil {
			err = fsm.ValidateKey(m.Key)
		}
		if err != nil {
			return indexResp{Code: codeInvalid, Msg: errMsg(err)}.encode(), nil
		}
		if !leading {
			return indexResp{Code: codeNotLeader}.encode(), nil
		}
		index, err := n.applyCap(m.Key, m.Max)
		return indexResp{Code: codeFor(err), Index: index, Msg: errMsg(err)}.encode(), nil
	}
	return nil, fmt.Errorf("node: unknown rpc method %d", method)
}

// leaderSyncIndex returns an index covering every entry committed so far:
// raft's barrier makes sure the leader applied all of them first.
func (n *Node) leaderSyncIndex() (uint64, error) {
	if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, errNotLeader
		}
		return 0, fmt.Errorf("%w: barrier: %w", errRetry, err)
	}
	return n.raft.AppliedIndex(), nil
}

// Sync returns once this node has applied every entry the leader had
// committed when Sync was called, so that reads on this node (Limit, Cap,
// Caps, Limits) are then at least as fresh as the leader's were. A node
// that just started or restarted may otherwise read state it has not
// caught up on yet. Register does this before comparing.
func (n *Node) Sync(ctx context.Context) error {
	var index uint64
	err := n.untilDone(ctx, "sync", func() (err error) {
		index, err = n.indexOnLeader(ctx, "sync", rpcSync, []byte{rpcVersion}, n.leaderSyncIndex)
		return err
	})
	if err != nil {
		return err
	}
	// raft's applied index, not the state's: the index may be a barrier or
	// configuration entry the state never sees.
	for n.raft.AppliedIndex() < index {
		if err := sleepCtx(ctx, n.ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("node: sync: waiting to apply index %d: %w", index, err)
		}
	}
	return nil
}
