package node

import (
	"context"
	"sync"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/node/wire"
)

// shareLoop runs on every node; while it leads, it renews every member's
// share lease (its own by a local call) every ShareTTL/3 and keeps
// fractions at 1/N, shrinking before growing. Taking back the fractions of
// members that are gone is reclaim's (churn.go).
func (n *Node) shareLoop() {
	defer n.wg.Done()
	loop.Every(n.ctx, n.cfg.ShareTTL/3, nil, func() bool {
		if !n.pacer.IsLeading() {
			return true
		}
		n.renewShares()
		if err := n.balanceFractions(); err != nil {
			n.log.Warn("balancing fractions", "err", err)
		}
		return true
	})
}

// renewShares sends one round of renewals and waits for the answers (each
// bounded by a third of the TTL: a later answer is not counted).
func (n *Node) renewShares() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	timeout := n.cfg.ShareTTL / 3
	var wg sync.WaitGroup
	for _, srv := range f.Configuration().Servers {
		id, addr := string(srv.ID), string(srv.Address)
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := n.now()
			var a wire.ShareAnswer
			var err error
			if id == n.cfg.NodeID {
				a = n.fallback.Renew()
			} else {
				ctx, cancel := context.WithTimeout(n.ctx, timeout)
				a, err = n.callShare(ctx, addr)
				cancel()
			}
			r := n.now()
			if err != nil || r-q > int64(timeout) {
				return
			}
			n.shares.Renewed(id, q, r, a)
			if a.Fenced {
				n.unfence(id) // this leader holds its share now
			}
		}()
	}
	wg.Wait()
	n.shares.RoundDone()
}

func (n *Node) callShare(ctx context.Context, addr string) (wire.ShareAnswer, error) {
	raw, err := n.trans.Call(ctx, addr, wire.MethodShare, wire.ShareReq{Leader: n.cfg.NodeID}.Encode())
	if err != nil {
		return wire.ShareAnswer{}, err
	}
	return wire.DecodeShareAnswer(raw)
}

// balanceFractions moves every member's fraction toward 1/N: shrinks are
// committed first; growth waits until every member has applied them (it
// says so in its renewal answers), so no member can believe a fraction
// larger than its share of 1 while another's grows.
func (n *Node) balanceFractions() error {
	n.memberWrites.Lock()
	defer n.memberWrites.Unlock()
	members := n.state.Members()
	if len(members) == 0 {
		return nil
	}
	target := 1 / float64(len(members))
	const eps = 1e-9
	var grow []fsm.Member
	for _, m := range members {
		switch {
		case m.Fraction > target+eps:
			m.Fraction = target
			index, err := n.applyMember(m)
			if err != nil {
				return err
			}
			n.fractionIndex.Store(index)
			n.log.Info("fallback fraction shrunk", "member", m.ID, "fraction", target)
		case m.Fraction < target-eps:
			grow = append(grow, m)
		}
	}
	if len(grow) == 0 || !n.shares.AllApplied(n.fractionIndex.Load()) {
		return nil
	}
	for _, m := range grow {
		m.Fraction = target
		if _, err := n.applyMember(m); err != nil {
			return err
		}
		n.log.Info("fallback fraction grown", "member", m.ID, "fraction", target)
	}
	return nil
}

func (n *Node) applyMember(m fsm.Member) (uint64, error) {
	return n.commit(&fsm.UpsertMember{Member: m}, commitTimeout)
}
