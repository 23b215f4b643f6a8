package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// maxSending bounds a member's messages of new requests on the wire at
// once, and minGap spaces them while one is: requests made meanwhile wait
// for the next message, so the busier the member, the more each message
// carries (as Nagle's algorithm does), and an idle member's request
// leaves at once. Without the gap a busy member sent a message every
// round trip, three requests each (10,000 keys at 1/s from three nodes:
// 1,000 messages a second per member).
const (
	maxSending = 2
	minGap     = 2 * time.Millisecond
)

// Call sends one message (method, req) to the leader, which may keep it
// up to maxWait, and returns its raw answer and the leader's address. Its
// failures are the node's: wire.Retryable ones are worth asking again;
// ErrNoBatches (wrapped) says the leader does not serve the method.
type Call func(ctx context.Context, method uint8, req []byte, maxWait time.Duration) (raw []byte, leader string, err error)

// ErrNoBatches: the leader refused wire.MethodLeases as a method it does
// not know (a build older than this package). The Client then sends the
// request alone (wire.MethodLease), as those builds did.
var ErrNoBatches = errors.New("node: the leader serves no lease batches")

// Client is the member's side: it carries its node's lease requests to
// the leader in messages of many, and keeps one poll waiting there while
// any request is unanswered.
type Client struct {
	holder string
	call   Call
	now    func() int64

	mu      sync.Mutex
	next    uint64
	queue   []*request          // not sent yet
	sent    map[uint64]*request // sent, unanswered
	sending int                 // messages of new requests on the wire
	polling bool                // a poll is on the wire
	leader  string              // the leader that answered last
	clock   clockBounds         // its clock against this node's
	wake    chan struct{}
	single  *InFlight // requests sent alone, to a leader of an older build
}

type request struct {
	item         wire.LeaseItem
	queued, left int64 // made; sent (0: not yet)
	// from, arrived: the interval of this clock in which the leader
	// stated its answer (clockBounds.place).
	from, arrived int64
	leader        string // where it was sent
	done          chan struct{}
	resp          wire.LeaseResp
	err           error
}

// NewClient returns the member's side for holder (this node's id); Run
// sends its messages.
func NewClient(holder string, call Call, now func() int64) *Client {
	return &Client{holder: holder, call: call, now: now, sent: make(map[uint64]*request), wake: make(chan struct{}, 1), single: NewInFlight(MaxInFlight)}
}

// Lease asks the leader for up to count slots of key within maxWait and
// waits for the answer (or ctx). A granted lease is placed in the interval
// of this node's clock in which the leader stated it (clockBounds.place):
// its Held runs from this call to the interval's start, and arrived is the
// interval's end, which the lease cache takes as its send plus Held and its
// arrival. A refusal comes back as the leader's LeaseResp (code and wait,
// for the node to map); a failure to reach the leader as the call's error.
func (c *Client) Lease(ctx context.Context, key string, count int, maxWait time.Duration) (resp wire.LeaseResp, arrived int64, err error) {
	r := &request{done: make(chan struct{})}
	c.mu.Lock()
	c.next++
	r.item = wire.LeaseItem{ID: c.next, Key: key, Count: count, MaxWait: maxWait}
	r.queued = c.now()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	c.kick()
	select {
	case <-r.done:
		if errors.Is(r.err, ErrNoBatches) {
			resp, err := c.alone(ctx, key, count, maxWait)
			return resp, 0, err
		}
		if r.err == nil && r.resp.Code == wire.CodeOK {
			// The lease cache counts use-by from its own send plus Held.
			r.resp.Lease.Held = r.from - r.queued
		}
		return r.resp, r.arrived, r.err
	case <-ctx.Done():
		c.forget(r)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return wire.LeaseResp{}, 0, &raftpace.LimitExceededError{Key: key, Wait: maxWait, MaxWait: maxWait}
		}
		return wire.LeaseResp{}, 0, fmt.Errorf("node: lease %q: %w", key, ctx.Err())
	}
}

// alone sends one request by itself (wire.MethodLease).
func (c *Client) alone(ctx context.Context, key string, count int, maxWait time.Duration) (wire.LeaseResp, error) {
	var resp wire.LeaseResp
	l, err := c.single.Send(ctx, key, maxWait, func() (wire.Lease, error) {
		raw, leader, err := c.call(ctx, wire.MethodLease, wire.LeaseReq{Key: key, Holder: c.holder, Count: count, MaxWait: maxWait}.Encode(), maxWait)
		if err == nil {
			if resp, err = wire.DecodeLeaseResp(raw); err != nil {
				err = fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, leader, err)
			}
		}
		return resp.Lease, err
	})
	resp.Lease = l
	return resp, err
}

// forget drops a request its caller gave up: an answer to it is dropped
// (a slot unused).
func (c *Client) forget(r *request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sent, r.item.ID)
	for i, q := range c.queue {
		if q == r {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
}

func (c *Client) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run sends messages until ctx ends; then every request still open fails
// with raftpace.ErrClosed.
func (c *Client) Run(ctx context.Context, wg *sync.WaitGroup) {
	gap := time.NewTimer(0)
	defer gap.Stop()
	var last int64 // when the last message of new requests left
	for {
		c.mu.Lock()
		wait := time.Duration(0)
		for len(c.queue) > 0 && c.sending < maxSending {
			if now := c.now(); c.sending > 0 && now-last < int64(minGap) {
				wait = time.Duration(last + int64(minGap) - now)
				break
			}
			n := min(len(c.queue), wire.MaxLeaseItems)
			batch := c.queue[:n:n]
			c.queue = c.queue[n:]
			c.sending++
			last = c.now()
			c.startLocked(ctx, wg, batch, false)
		}
		if len(c.sent) > 0 && !c.polling {
			c.polling = true
			c.startLocked(ctx, wg, nil, true)
		}
		c.mu.Unlock()
		var tick <-chan time.Time
		if wait > 0 {
			gap.Reset(wait)
			tick = gap.C
		}
		select {
		case <-tick:
		case <-c.wake:
		case <-ctx.Done():
			c.mu.Lock()
			for _, r := range c.queue {
				c.finishLocked(r, wire.LeaseResp{}, raftpace.ErrClosed)
			}
			for _, r := range c.sent {
				c.finishLocked(r, wire.LeaseResp{}, raftpace.ErrClosed)
			}
			c.queue = nil
			c.mu.Unlock()
			return
		}
	}
}

// startLocked sends one message (batch's requests, or a poll) in its own
// goroutine; c.mu is held.
func (c *Client) startLocked(ctx context.Context, wg *sync.WaitGroup, batch []*request, poll bool) {
	now := c.now()
	m := wire.LeasesReq{Holder: c.holder, Park: poll, Items: make([]wire.LeaseItem, len(batch))}
	for i, r := range batch {
		r.left = now
		c.sent[r.item.ID] = r
		m.Items[i] = r.item
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw, leader, err := c.call(ctx, wire.MethodLeases, m.Encode(), PollFor)
		arrived := c.now()
		var resp wire.LeasesResp
		if err == nil {
			if resp, err = wire.DecodeLeasesResp(raw); err != nil {
				err = fmt.Errorf("%w: leader %s: %w", wire.ErrRetry, leader, err)
			} else if resp.Code != wire.CodeOK {
				err = wire.LeaderErr("leases", resp.Code, resp.Msg)
			}
		}
		c.mu.Lock()
		if err == nil && c.clock.observe(leader, resp.Epoch, now, resp.Recv, resp.Sent, arrived) {
			// The leader restarted: what it was asked before is gone.
			for _, r := range c.sent {
				if r.left < now {
					c.finishLocked(r, wire.LeaseResp{}, fmt.Errorf("%w: leader %s restarted", wire.ErrRetry, leader))
				}
			}
		}
		c.answeredLocked(batch, leader, arrived, resp, err)
		if poll {
			c.polling = false
		} else {
			c.sending--
		}
		c.mu.Unlock()
		c.kick()
	}()
}

// answeredLocked delivers a message's answers. A message that failed
// (other than by the leader's slowness) fails its own requests and every
// request sent to that leader: it is gone, or not leading. One that
// succeeded fails the requests sent to another leader: that one will not
// answer them here.
func (c *Client) answeredLocked(batch []*request, leader string, arrived int64, resp wire.LeasesResp, err error) {
	if err != nil && leader != "" && errors.Is(err, context.DeadlineExceeded) {
		// The leader is slow, not gone: the requests it holds for this
		// node answer by a later poll. Only this message's own fail (its
		// answer, with their grants, is lost): failing every request
		// sent (to ask again) piled duplicates on a loaded leader, whose
		// messages then took longer still: no grant at all for 30 s,
		// 2,000 keys on three in-process nodes under the race detector.
		for _, r := range batch {
			c.finishLocked(r, wire.LeaseResp{}, err)
		}
		return
	}
	if err != nil {
		for _, r := range batch {
			c.finishLocked(r, wire.LeaseResp{}, err)
		}
		for _, r := range c.sent {
			if r.leader == leader || leader == "" {
				c.finishLocked(r, wire.LeaseResp{}, err)
			}
		}
		return
	}
	for _, r := range batch {
		r.leader = leader
	}
	for _, a := range resp.Items {
		if r := c.sent[a.ID]; r != nil {
			r.from, r.arrived = c.clock.place(resp.Sent-a.Age, r.left, arrived)
			c.finishLocked(r, a.LeaseResp, nil)
		}
	}
	if leader == c.leader {
		return
	}
	// Not at every answer: a look at every request open (ten thousand)
	// per message was a tenth of a member's CPU.
	c.leader = leader
	for _, r := range c.sent {
		if r.leader != "" && r.leader != leader {
			c.finishLocked(r, wire.LeaseResp{}, fmt.Errorf("%w: the leader changed from %s to %s", wire.ErrRetry, r.leader, leader))
		}
	}
}

func (c *Client) finishLocked(r *request, resp wire.LeaseResp, err error) {
	delete(c.sent, r.item.ID)
	select {
	case <-r.done:
		return
	default:
	}
	r.resp, r.err = resp, err
	close(r.done)
}
