package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// maxCallAttempts bounds how often Call picks a connection again after
// finding it broken before its request was written (nothing was sent, so a
// retry cannot run the request twice).
const maxCallAttempts = 3

// errIdle marks a pooled connection retired for idleness; no call sees it.
var errIdle = errors.New("transport: idle connection closed")

// Call sends one request to the transport at addr (its advertised
// host:port) and returns the response payload. It reuses a pooled
// connection (up to 2 per address, multiplexed, dialled on demand) and
// honours ctx: when ctx ends first Call returns ctx.Err() wrapped and the
// late response is discarded.
//
// A handler error comes back as *RemoteError. A request that does not fit
// MaxFrameSize fails with ErrFrameTooLarge before anything is sent. If the
// connection breaks while the call waits, it fails with ErrConnLost (the
// peer may or may not have run the request) and the next Call redials.
// After Close, Call returns ErrClosed. req is not retained after Call
// returns; the response belongs to the caller.
func (t *Transport) Call(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error) {
	t.stats.callsOut.Add(1)
	resp, err := t.call(ctx, addr, method, req)
	if err != nil {
		t.stats.callErrors.Add(1)
		var re *RemoteError
		if !errors.As(err, &re) {
			err = fmt.Errorf("transport: call %s method %d: %w", addr, method, err)
		}
	}
	return resp, err
}

func (t *Transport) call(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error) {
	if t.closing() {
		return nil, ErrClosed
	}
	if headerSize+len(req) > t.cfg.MaxFrameSize {
		return nil, fmt.Errorf("%w: request of %d bytes exceeds MaxFrameSize %d less the %d-byte header",
			ErrFrameTooLarge, len(req), t.cfg.MaxFrameSize, headerSize)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := t.peer(addr)
	for attempt := 1; ; attempt++ {
		cc, err := p.get(ctx)
		if err != nil {
			return nil, err
		}
		resp, sent, err := cc.roundTrip(ctx, method, req)
		p.release(cc)
		// A peer refusing us for TLS will refuse the next connection too.
		if err != nil && !sent && attempt < maxCallAttempts && ctx.Err() == nil && !t.closing() && !errors.Is(err, ErrTLS) {
			continue
		}
		return resp, err
	}
}

// Probe checks that addr answers: it opens a pooled RPC connection to it
// (or finds one open), without sending a request. With Config.TLS a
// connection exists only once both ends have checked each other's
// certificate against the cluster CA, so a nil error means the peer is a
// member by the TLS trust model; the error, wrapping ErrTLS, says why not.
// Without TLS it only shows that something accepts connections at addr.
func (t *Transport) Probe(ctx context.Context, addr string) error {
	if t.closing() {
		return ErrClosed
	}
	p := t.peer(addr)
	cc, err := p.get(ctx)
	if err != nil {
		return fmt.Errorf("transport: probe %s: %w", addr, err)
	}
	broken := cc.broken()
	p.release(cc)
	if broken {
		return fmt.Errorf("transport: probe %s: %w", addr, ErrConnLost)
	}
	return nil
}

// peer returns the connection pool for addr.
func (t *Transport) peer(addr string) *peer {
	if p, ok := t.peers.Load(addr); ok {
		return p.(*peer)
	}
	p, _ := t.peers.LoadOrStore(addr, &peer{t: t, addr: addr})
	return p.(*peer)
}

// peer is the pool of RPC connections to one address.
type peer struct {
	t    *Transport
	addr string

	mu      sync.Mutex
	conns   []*clientConn
	dialing chan struct{} // non-nil while a dial runs; closed when it ends
}

// get returns a connection with its inflight count raised; the caller
// passes it to release. It prefers an idle connection, dials a new one
// while the pool is below maxConnsPerPeer and every connection is busy,
// and otherwise shares the least busy one.
func (p *peer) get(ctx context.Context) (*clientConn, error) {
	for {
		p.mu.Lock()
		var best *clientConn
		for _, cc := range p.conns {
			if best == nil || cc.inflight < best.inflight {
				best = cc
			}
		}
		if best != nil && (best.inflight == 0 || len(p.conns) >= maxConnsPerPeer || p.dialing != nil) {
			best.inflight++
			p.mu.Unlock()
			return best, nil
		}
		if wait := p.dialing; wait != nil {
			// The pool is empty and someone is dialling: wait for them.
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-p.t.closed:
				return nil, ErrClosed
			}
		}
		done := make(chan struct{})
		p.dialing = done
		p.mu.Unlock()

		cc, err := p.t.dialRPC(ctx, p)

		p.mu.Lock()
		p.dialing = nil
		close(done)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		// If the connection already broke, fail has run (or waits for
		// p.mu and will remove it); keep a dead one out of the pool.
		// The caller's roundTrip then fails without sending.
		if !cc.broken() {
			p.conns = append(p.conns, cc)
		}
		cc.inflight++
		p.mu.Unlock()
		return cc, nil
	}
}

// release returns a connection obtained from get.
func (p *peer) release(cc *clientConn) {
	now := p.t.now()
	p.mu.Lock()
	cc.inflight--
	cc.lastUsed = now
	p.mu.Unlock()
}

// remove drops cc from the pool (if it is there).
func (p *peer) remove(cc *clientConn) {
	p.mu.Lock()
	p.conns = slices.DeleteFunc(p.conns, func(c *clientConn) bool { return c == cc })
	p.mu.Unlock()
}

// clientConn is one pooled, multiplexed RPC connection.
type clientConn struct {
	t    *Transport
	p    *peer
	c    *trackedConn
	wsem chan struct{} // write lock that a waiting caller can give up on

	mu      sync.Mutex
	pending map[uint64]*call // nil once broken
	nextID  uint64
	err     error // why the connection broke; nil while usable

	// Guarded by p.mu.
	inflight int           // calls holding the connection (get..release)
	lastUsed time.Duration // t.now() at the last release
}

// call is one outstanding request. ch has room for the single result, so
// the reader never blocks delivering it.
type call struct {
	ch chan result
}

type result struct {
	status  uint8
	payload []byte
	err     error // connection failure; status and payload unset
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan result, 1)} }}

// dialRPC opens a new RPC connection to p and starts its reader.
func (t *Transport) dialRPC(ctx context.Context, p *peer) (*clientConn, error) {
	c, err := t.dial(ctx, p.addr, streamRPC, 0)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{
		t:        t,
		p:        p,
		c:        c,
		wsem:     make(chan struct{}, 1),
		pending:  make(map[uint64]*call),
		lastUsed: t.now(),
	}
	if !t.goTracked(cc.readLoop) {
		_ = c.Close()
		return nil, ErrClosed
	}
	return cc, nil
}

func (cc *clientConn) broken() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err != nil
}

// roundTrip sends one request and waits for its response. sent reports
// whether any byte of the request may have reached the peer; when it is
// false the call can safely be retried on another connection.
func (cc *clientConn) roundTrip(ctx context.Context, method uint8, req []byte) (resp []byte, sent bool, err error) {
	cl := callPool.Get().(*call)
	cc.mu.Lock()
	if cc.err != nil {
		err := cc.err
		cc.mu.Unlock()
		callPool.Put(cl)
		cc.p.remove(cc)
		return nil, false, err
	}
	cc.nextID++
	id := cc.nextID
	cc.pending[id] = cl
	cc.mu.Unlock()

	// Take the write lock, giving up if ctx ends first.
	select {
	case cc.wsem <- struct{}{}:
	default:
		select {
		case cc.wsem <- struct{}{}:
		case <-ctx.Done():
			cc.abandon(id, cl)
			return nil, false, ctx.Err()
		}
	}
	bp := getBuf()
	*bp = appendFrame(*bp, id, method, req)
	// A write may stall for at most IdleTimeout, or until ctx's deadline.
	wd := time.Now().Add(cc.t.cfg.IdleTimeout)
	dl, ctxBound := ctx.Deadline()
	if ctxBound = ctxBound && dl.Before(wd); ctxBound {
		wd = dl
	}
	_ = cc.c.SetWriteDeadline(wd)
	n, werr := cc.c.Write(*bp)
	<-cc.wsem
	putBuf(bp)
	if werr != nil {
		if ctxBound && errors.Is(werr, os.ErrDeadlineExceeded) {
			// The caller's deadline passed while writing. If nothing was
			// written the connection is intact; otherwise it carries half
			// a frame and must go.
			if n > 0 {
				cc.fail(fmt.Errorf("write cut short by a caller's deadline: %w", werr))
			}
			cc.abandon(id, cl)
			return nil, n > 0, context.DeadlineExceeded
		}
		cc.fail(fmt.Errorf("write: %w", werr))
		sent = n > 0
	} else {
		sent = true
	}

	select {
	case r := <-cl.ch:
		callPool.Put(cl)
		switch {
		case r.err != nil:
			return nil, sent, r.err
		case r.status == statusOK:
			return r.payload, true, nil
		default:
			return nil, true, &RemoteError{Message: string(r.payload)}
		}
	case <-ctx.Done():
		cc.abandon(id, cl)
		return nil, sent, ctx.Err()
	}
}

// abandon forgets a call whose caller has given up. If the reader (or fail)
// already took the call it will deliver into cl.ch, so cl is not reused.
func (cc *clientConn) abandon(id uint64, cl *call) {
	cc.mu.Lock()
	_, ok := cc.pending[id]
	delete(cc.pending, id)
	cc.mu.Unlock()
	if ok {
		callPool.Put(cl)
	}
}

// fail marks the connection broken for cause, drops it from the pool,
// closes it, and fails every pending call. Only the first cause counts.
func (cc *clientConn) fail(cause error) {
	var err error
	if cc.t.closing() {
		err = ErrClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrConnLost, cause)
	}
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	pending := cc.pending
	cc.pending = nil
	cc.mu.Unlock()

	cc.p.remove(cc)
	_ = cc.c.Close()
	for _, cl := range pending {
		cl.ch <- result{err: err}
	}
}

// retireIfIdle closes the connection if no call holds it and it has not
// been used for IdleTimeout. Otherwise it returns how long to wait before
// asking again.
func (cc *clientConn) retireIfIdle() (retired bool, wait time.Duration) {
	idle := cc.t.cfg.IdleTimeout
	p := cc.p
	p.mu.Lock()
	if cc.inflight > 0 {
		p.mu.Unlock()
		return false, idle
	}
	if since := cc.t.now() - cc.lastUsed; since < idle {
		p.mu.Unlock()
		return false, idle - since
	}
	p.conns = slices.DeleteFunc(p.conns, func(c *clientConn) bool { return c == cc })
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = errIdle
	}
	cc.pending = nil // empty: nothing holds the connection
	cc.mu.Unlock()
	p.mu.Unlock()
	_ = cc.c.Close()
	return true, 0
}

// readLoop reads responses and hands each to its call, until the
// connection breaks or idles out.
func (cc *clientConn) readLoop() {
	br := bufio.NewReaderSize(cc.c.Conn, readBufSize)
	maxLen := cc.t.cfg.MaxFrameSize
	wait := cc.t.cfg.IdleTimeout
	var refresh time.Time
	first := cc.t.tlsClient == nil // check the first answer for a TLS alert
	for {
		if now := time.Now(); br.Buffered() == 0 || now.After(refresh) {
			_ = cc.c.SetReadDeadline(now.Add(wait))
			refresh = now.Add(wait / 2)
		}
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					retired, w := cc.retireIfIdle()
					if retired {
						return
					}
					wait = w
					refresh = time.Time{}
					continue
				}
				cc.fail(err)
				return
			}
			wait = cc.t.cfg.IdleTimeout
			now := time.Now()
			_ = cc.c.SetReadDeadline(now.Add(wait))
			refresh = now.Add(wait / 2)
		}
		if first {
			first = false
			if h, _ := br.Peek(2); isTLSAlert(h) {
				// A TLS node refusing this plaintext connection.
				err := fmt.Errorf("%w: the peer answered with a TLS alert: it requires TLS, and this node has no TLS configured", ErrTLS)
				cc.t.log.Warn("transport: peer requires TLS; closing connection", "remote", cc.p.addr)
				cc.fail(err)
				return
			}
		}
		f, err := readFrame(br, maxLen)
		if err != nil {
			if !cc.t.closing() && !errors.Is(err, os.ErrDeadlineExceeded) {
				cc.t.log.Warn("transport: bad RPC response; closing connection", "remote", cc.p.addr, "err", err)
			}
			cc.fail(err)
			return
		}
		if f.code != statusOK && f.code != statusError {
			err := fmt.Errorf("%w: unknown response status %d", ErrBadFrame, f.code)
			cc.t.log.Warn("transport: bad RPC response; closing connection", "remote", cc.p.addr, "err", err)
			cc.fail(err)
			return
		}
		cc.mu.Lock()
		cl := cc.pending[f.id]
		delete(cc.pending, f.id) // no-op on nil map or unknown (abandoned) id
		cc.mu.Unlock()
		if cl != nil {
			cl.ch <- result{status: f.code, payload: f.payload}
		}
	}
}
