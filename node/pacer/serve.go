package pacer

import (
	"context"
	"errors"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// ServeReserve is the leader's side of wire.MethodReserve: the request's
// bytes in, the answer's out. pausedFor is the node's refusal gate: a
// node that has not applied a pause yet (one just restarted, or lagging)
// must not be granted a paused key.
func (p *Pacer) ServeReserve(ctx context.Context, done <-chan struct{}, req []byte, pausedFor func(string) time.Duration) []byte {
	m, err := wire.DecodeReserveReq(req)
	if err == nil {
		err = wire.CheckWants(m.Wants)
	}
	if err != nil {
		return wire.ReserveResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	// Name the key of a refusal only when several were asked: an answer
	// about one key is the bytes it always was.
	nameKey := func(key string) string {
		if len(m.Wants) == 1 {
			return ""
		}
		return key
	}
	for _, w := range m.Wants {
		if d := pausedFor(w.Key); d > 0 {
			return wire.ReserveResp{Code: wire.CodePaused, Wait: d, Key: nameKey(w.Key)}.Encode()
		}
	}
	ctx, cancel := callerBound(ctx, m.MaxWait)
	defer cancel()
	wait, held, err := p.ReserveAll(ctx, done, m.Wants, m.MaxWait)
	var qe *raftpace.QuotaExhaustedError
	if errors.As(err, &qe) {
		return wire.ReserveResp{Code: wire.CodeQuotaExhausted, Wait: p.untilReset(qe), Msg: wire.ErrMsg(err), Key: nameKey(qe.Key)}.Encode()
	}
	var le *raftpace.LimitExceededError
	if errors.As(err, &le) {
		return wire.ReserveResp{Code: wire.CodeLimitExceeded, Wait: le.Wait, Msg: wire.ErrMsg(err), Key: nameKey(le.Key)}.Encode()
	}
	return wire.ReserveResp{Code: wire.CodeFor(err), Wait: wait, Held: held, Msg: wire.ErrMsg(err)}.Encode()
}

// ServeLease is the leader's side of wire.MethodLease (see ServeReserve).
func (p *Pacer) ServeLease(ctx context.Context, done <-chan struct{}, req []byte, pausedFor func(string) time.Duration) []byte {
	m, err := wire.DecodeLeaseReq(req)
	if err == nil {
		err = fsm.ValidateKey(m.Key)
	}
	if err == nil {
		err = fsm.ValidateID(m.Holder)
	}
	if err != nil {
		return wire.LeaseResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if d := pausedFor(m.Key); d > 0 {
		return wire.LeaseResp{Code: wire.CodePaused, Wait: d}.Encode()
	}
	ctx, cancel := callerBound(ctx, m.MaxWait)
	defer cancel()
	l, at, err := p.lease(ctx, done, m.Key, m.Holder, m.Count, m.MaxWait, p.newHold(m.MaxWait))
	if err == nil {
		// Stated as it leaves: the asking node counts from the answer's
		// arrival only the network's part of the delay.
		l = l.Restated(p.now() - at)
	}
	return p.LeaseAnswer(l, err).Encode()
}

// LeaseAnswer is the answer to a lease request that ended in l, err.
func (p *Pacer) LeaseAnswer(l wire.Lease, err error) wire.LeaseResp {
	var qe *raftpace.QuotaExhaustedError
	if errors.As(err, &qe) {
		return wire.LeaseResp{Code: wire.CodeQuotaExhausted, Wait: p.untilReset(qe), Msg: wire.ErrMsg(err)}
	}
	var le *raftpace.LimitExceededError
	if errors.As(err, &le) {
		return wire.LeaseResp{Code: wire.CodeLimitExceeded, Wait: le.Wait, Msg: wire.ErrMsg(err)}
	}
	return wire.LeaseResp{Code: wire.CodeFor(err), Lease: l, Msg: wire.ErrMsg(err)}
}

// callerBound bounds a request's stay by its caller's maximum wait plus a
// second: the caller's deadline does not travel with the request, and the
// leader must not grant a slot long after the caller gave up on it.
func callerBound(ctx context.Context, maxWait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(maxWait, 0)+time.Second)
}

// untilReset is how long a spent quota has left, on this leader's clock:
// the asking node places the reset from the answer's arrival.
func (p *Pacer) untilReset(qe *raftpace.QuotaExhaustedError) time.Duration {
	return max(0, qe.Reset.Sub(p.Wall()))
}

// ServeRemaining is the leader's side of wire.MethodRemaining.
func (p *Pacer) ServeRemaining(req []byte) []byte {
	m, err := wire.DecodeRemainingReq(req)
	if err == nil {
		err = fsm.ValidateKey(m.Key)
	}
	if err != nil {
		return wire.RemainingResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	r, err := p.Remaining(m.Key)
	return wire.RemainingResp{Code: wire.CodeFor(err), Remaining: r, Msg: wire.ErrMsg(err)}.Encode()
}
