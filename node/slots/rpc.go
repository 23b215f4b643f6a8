package slots

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// The leader's side of the slot and cap RPCs. Each Serve answers one
// request from another node; leading says whether raft says this node
// leads (a follower answers CodeNotLeader once the request is valid).

// ServeAcquire answers wire.MethodAcquireSlots.
func (s *Slots) ServeAcquire(ctx context.Context, leading bool, req []byte) []byte {
	m, err := wire.DecodeAcquireReq(req)
	if err == nil {
		err = fsm.ValidateID(m.ID)
	}
	if err == nil {
		err = fsm.ValidateID(m.Holder)
	}
	if err == nil {
		var keys []string
		keys, err = CheckKeys(m.Keys)
		m.Keys = keys
	}
	if err == nil && (m.TTL <= 0 || m.TTL > s.d.MaxSlotTTL) {
		err = fmt.Errorf("ttl %v must be in (0, %v] (the leader's MaxSlotTTL)", m.TTL, s.d.MaxSlotTTL)
	}
	if err != nil {
		return wire.AcquireResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if !leading {
		return wire.AcquireResp{Code: wire.CodeNotLeader}.Encode()
	}
	ctx, cancel := context.WithTimeout(ctx, min(max(m.MaxWait, 0), 5*time.Second)+time.Second)
	defer cancel()
	m.MaxWait = min(max(m.MaxWait, 0), 5*time.Second)
	full, err := s.leaderAcquire(ctx, m)
	if errors.Is(err, raftpace.ErrConcurrencyLimit) {
		return wire.AcquireResp{Code: wire.CodeConcurrency, Full: full, Msg: wire.ErrMsg(err)}.Encode()
	}
	return wire.AcquireResp{Code: wire.CodeFor(err), Msg: wire.ErrMsg(err)}.Encode()
}

// ServeRelease answers wire.MethodReleaseSlots.
func (s *Slots) ServeRelease(leading bool, req []byte) []byte {
	m, err := wire.DecodeReleaseReq(req)
	if err == nil {
		for _, id := range m.IDs {
			if err = fsm.ValidateID(id); err != nil {
				break
			}
		}
	}
	if err != nil {
		return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if !leading {
		return wire.IndexResp{Code: wire.CodeNotLeader}.Encode()
	}
	index, err := s.leaderRelease(m.IDs)
	return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode()
}

// ServeSetCap answers wire.MethodSetCap (Max 0 deletes the cap).
func (s *Slots) ServeSetCap(leading bool, req []byte) []byte {
	m, err := wire.DecodeCapReq(req)
	if err == nil {
		err = fsm.ValidateKey(m.Key)
	}
	if err != nil {
		return wire.IndexResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if !leading {
		return wire.IndexResp{Code: wire.CodeNotLeader}.Encode()
	}
	index, err := s.applyCap(m.Key, m.Max)
	return wire.IndexResp{Code: wire.CodeFor(err), Index: index, Msg: wire.ErrMsg(err)}.Encode()
}
