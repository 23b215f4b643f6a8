package loadgen

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/node"
)

// StartNode runs the load of specs against n until ctx ends and returns a
// function that waits for every load goroutine to finish. Nothing starts
// before n knows a leader. In mode "solo" each key is paced by a local GCRA
// at its full replicated limit, without asking the leader: coordination
// turned off, for showing that a ceiling test can fail.
func StartNode(ctx context.Context, n Node, specs []Spec, mode string, rec Recorder, log *slog.Logger) (wait func()) {
	r := Start(ctx, NodeTarget(n, mode, node.DefaultConfig().UseGrace), specs, Options{}, rec, log.With("load_mode", mode))
	return r.Wait
}

// NodeTarget is the load target of an agent: the node through a client, or
// in mode "solo" a local pacer per key at the node's replicated limit.
func NodeTarget(n Node, mode string, grace time.Duration) Target {
	t := Target{
		Res:   client.New(n),
		Ready: n.WaitForLeader,
		LimitKnown: func(ctx context.Context, key string) bool {
			_, err := n.Limit(ctx, key)
			return !errors.Is(err, raftpace.ErrUnknownKey)
		},
	}
	if mode == "solo" {
		t.Res = &soloReserver{n: n, grace: grace, pacers: map[string]*soloPacer{}}
	}
	return t
}

// noDeadline is the maximum wait of a closed-loop reservation (client.Wait's
// without a context deadline).
const noDeadline = 10 * time.Minute

// soloReserver is mode "solo" (the agent's --load-mode solo): each key
// paced by a local GCRA at its replicated limit, never asking the leader.
type soloReserver struct {
	n     Node
	grace time.Duration

	mu     sync.Mutex
	pacers map[string]*soloPacer
}

func (s *soloReserver) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	lim, err := s.n.Limit(ctx, key)
	if err != nil {
		return client.Reservation{}, err
	}
	s.mu.Lock()
	p := s.pacers[key]
	if p == nil {
		p = &soloPacer{epoch: time.Now()}
		s.pacers[key] = p
	}
	s.mu.Unlock()
	now := time.Now()
	d, ok := p.reserveWithin(lim, n, maxWait)
	if !ok {
		return client.Reservation{}, &client.LimitExceededError{Key: key, Wait: d, MaxWait: maxWait}
	}
	at := now.Add(d)
	return client.Reservation{At: at, UseBy: at.Add(s.grace)}, nil
}

// ReserveAll takes each key's slot from its local pacer, one after another
// (the twin has no leader to grant them at one instant), and answers the
// latest; none is given back on a refusal: it is the twin.
func (s *soloReserver) ReserveAll(ctx context.Context, maxWait time.Duration, wants ...client.Want) (client.Reservation, error) {
	var r client.Reservation
	for _, w := range wants {
		one, err := s.ReserveN(ctx, w.Key, w.Count, maxWait)
		if err != nil {
			return client.Reservation{}, err
		}
		if one.At.After(r.At) {
			r = one
		}
	}
	return r, nil
}

func (s *soloReserver) Forfeit(client.Reservation) {}

// soloPacer is a local GCRA on this process's monotonic clock, shared by
// the goroutines of one key.
type soloPacer struct {
	epoch time.Time

	mu     sync.Mutex
	lim    fsm.Limit
	params gcra.Params
	tat    int64
}

// reserve takes the next slot and returns how long to wait for it.
func (p *soloPacer) reserve(lim fsm.Limit) time.Duration {
	d, _ := p.reserveWithin(lim, 1, noDeadline)
	return d
}

// reserveWithin takes n slots if the wait for them is at most maxWait and
// returns the wait; otherwise it takes nothing and returns the wait with
// false.
func (p *soloPacer) reserveWithin(lim fsm.Limit, n int, maxWait time.Duration) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim != p.lim {
		p.lim = lim
		p.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
	}
	now := int64(time.Since(p.epoch))
	start, tat, err := gcra.Reserve(p.tat, p.params, now, n)
	if err != nil { // n above the burst
		return maxWait + 1, false
	}
	if d := time.Duration(start - now); d > maxWait {
		return d, false
	}
	p.tat = tat
	return time.Duration(start - now), true
}
