// Package batch carries a member's lease requests of many keys to the
// leader in one message (wire.MethodLeases), and their answers back in
// one, whenever each is granted.
//
// # What it promises
//
//   - A request the leader can answer at once is answered in the reply to
//     the message that carried it. One that must wait (for its share to
//     reach its slot, for a horizon commit) waits on the leader, as a
//     single lease request would, and its answer travels in the next
//     message the member has waiting there (a poll), made when it is
//     granted, not at a time guessed in advance. So a member's callers
//     queue on the leader beside the leader's own, in the order the pacer
//     takes them, however many keys they wait on; no bound of requests in
//     flight keeps them back.
//   - Every lease is stated as the message carrying it leaves
//     (wire.Lease.Restated): an answer that waited in the leader's box
//     costs the member none of its UseGrace.
//   - Nothing is granted twice for one request, and an answer nobody takes
//     is a slot unused, never one used late: the member drops answers of
//     requests it gave up, the leader drops answers no poll took within
//     dropAfter.
//
// # What it may depend on
//
// node/wire (the messages) and the standard library. The leader's side is
// given its pacer's grants as functions; the member's side its way to call
// the leader. Package node wires both.
package batch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// PollFor is how long the leader keeps a poll with nothing to answer; the
// member polls again. It is below the member's bound on a call to the
// leader (wire.LeaderCallTimeout: a second and a half at this wait).
const PollFor = time.Second

// dropAfter is how long the leader keeps an answer no poll has taken: its
// member stopped asking (it left, failed over, or its caller gave up).
// Past it every slot it carried has passed anyway (a grant is held at
// most pacer.MaxHold, a second, and slots lie within a maximum wait).
const dropAfter = 10 * time.Second

// Pacer is what the leader's side needs of its pacer (package
// node/pacer): a grant that may wait, one that answers wire.ErrWouldWait
// instead, the answer to a request, and whether it leads.
type Pacer interface {
	LeaseAt(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error)
	TryLease(key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error)
	LeaseAnswer(l wire.Lease, err error) wire.LeaseResp
	IsLeading() bool
}

// Grants is what the leader's side is given: its pacer, the refusal gate
// (how long a key is paused), its clock (and the clock's name) and its
// lifetime.
type Grants struct {
	Pacer  Pacer
	Paused func(key string) time.Duration
	Now    func() int64
	Epoch  int64 // names Now's clock: another after a restart
	Done   <-chan struct{}
	WG     *sync.WaitGroup
}

// Server is the leader's side: one box of answers per member.
type Server struct {
	g     Grants
	mu    sync.Mutex
	boxes map[string]*box
	swept int64
}

type box struct {
	ready   []answer
	changed chan struct{} // closed (and replaced) when an answer is put in
	waiting int           // requests granting on the leader for this member
	seen    int64         // its last message
}

type answer struct {
	wire.LeaseAnswer
	at int64 // when it was granted (restated from here)
}

// NewServer returns the leader's side.
func NewServer(g Grants) *Server {
	return &Server{g: g, boxes: make(map[string]*box)}
}

// Serve is the leader's side of wire.MethodLeases: the request's bytes in,
// the answer's out.
func (s *Server) Serve(ctx context.Context, req []byte) []byte {
	m, err := wire.DecodeLeasesReq(req)
	if err == nil {
		err = fsm.ValidateID(m.Holder)
	}
	if err != nil {
		return wire.LeasesResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if !s.g.Pacer.IsLeading() {
		return wire.LeasesResp{Code: wire.CodeNotLeader, Msg: wire.ErrMsg(wire.ErrNotLeader)}.Encode()
	}
	entry := s.g.Now() // the answer's Recv (clockBounds)
	b := s.box(m.Holder)
	var out []answer
	for _, it := range m.Items {
		if a, ok := s.begin(b, m.Holder, it); ok {
			out = append(out, a)
		}
	}
	out = s.take(b, out)
	if len(out) == 0 && m.Park {
		out = s.await(ctx, b)
	}
	now := s.g.Now()
	resp := wire.LeasesResp{Code: wire.CodeOK, Epoch: s.g.Epoch, Recv: entry, Sent: now, Items: make([]wire.LeaseAnswer, len(out))}
	for i, a := range out {
		if a.Code == wire.CodeOK {
			// Stated as the answer leaves, or as near as its first slot
			// allows (Age).
			l := a.Lease.Restated(now - a.at)
			a.Age = now - a.at - (l.Held - a.Lease.Held)
			a.Lease = l
		}
		resp.Items[i] = a.LeaseAnswer
	}
	return resp.Encode()
}

// begin answers it at once (ok), or starts its wait on the leader, whose
// answer goes to holder's box b.
func (s *Server) begin(b *box, holder string, it wire.LeaseItem) (answer, bool) {
	if err := fsm.ValidateKey(it.Key); err != nil {
		return s.answerOf(it.ID, wire.Lease{}, 0, err), true
	}
	if d := s.g.Paused(it.Key); d > 0 {
		return answer{LeaseAnswer: wire.LeaseAnswer{ID: it.ID, LeaseResp: wire.LeaseResp{Code: wire.CodePaused, Wait: d}}}, true
	}
	l, at, err := s.g.Pacer.TryLease(it.Key, holder, it.Count, it.MaxWait)
	if !errors.Is(err, wire.ErrWouldWait) {
		return s.answerOf(it.ID, l, at, err), true
	}
	s.mu.Lock()
	b.waiting++
	s.mu.Unlock()
	s.g.WG.Add(1)
	go func() {
		defer s.g.WG.Done()
		// As a single request's: the caller's maximum wait and a second.
		ctx, cancel := context.WithTimeout(context.Background(), max(it.MaxWait, 0)+time.Second)
		defer cancel()
		l, at, err := s.g.Pacer.LeaseAt(ctx, s.g.Done, it.Key, holder, it.Count, it.MaxWait)
		s.put(b, s.answerOf(it.ID, l, at, err))
	}()
	return answer{}, false
}

// answerOf is the answer to request id that ended in l (granted at at),
// err. Its Held is the pacer's alone: the member places a lease by the
// leader's clock (clockBounds), not by its own send plus Held.
func (s *Server) answerOf(id uint64, l wire.Lease, at int64, err error) answer {
	return answer{LeaseAnswer: wire.LeaseAnswer{ID: id, LeaseResp: s.g.Pacer.LeaseAnswer(l, err)}, at: at}
}

// box returns holder's box, made on first use; it also drops the boxes of
// members silent for a while, and their answers.
func (s *Server) box(holder string) *box {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.g.Now()
	if now-s.swept > int64(dropAfter) {
		s.swept = now
		for h, b := range s.boxes {
			if b.waiting == 0 && now-b.seen > int64(dropAfter) {
				delete(s.boxes, h)
			}
		}
	}
	b := s.boxes[holder]
	if b == nil {
		b = &box{changed: make(chan struct{})}
		s.boxes[holder] = b
	}
	b.seen = now
	return b
}

// put leaves a waited request's answer in its member's box.
func (s *Server) put(b *box, a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.waiting--
	b.ready = append(b.ready, a)
	close(b.changed)
	b.changed = make(chan struct{})
}

// take appends to out the box's answers, as many as one message carries,
// dropping those no poll took within dropAfter.
func (s *Server) take(b *box, out []answer) []answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.g.Now()
	kept := b.ready[:0]
	for _, a := range b.ready {
		switch {
		case a.Code == wire.CodeOK && now-a.at > int64(dropAfter):
		case len(out) < wire.MaxLeaseItems:
			out = append(out, a)
		default:
			kept = append(kept, a)
		}
	}
	clear(b.ready[len(kept):])
	b.ready = kept
	return out
}

// await keeps a poll until its box has answers, PollFor passes, or the
// call or the node ends.
func (s *Server) await(ctx context.Context, b *box) []answer {
	t := time.NewTimer(PollFor)
	defer t.Stop()
	for {
		s.mu.Lock()
		ch := b.changed
		s.mu.Unlock()
		if out := s.take(b, nil); len(out) > 0 {
			return out
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-s.g.Done:
			return nil
		}
	}
}
