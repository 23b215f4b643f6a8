package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Handler serves one RPC. method is an application-defined byte; req is the
// request payload, owned by the handler (it may keep it). Handler returns the
// response payload, or an error whose text is sent back to the caller, who
// gets a *RemoteError.
//
// Handlers run concurrently, one goroutine per request. ctx is cancelled
// when the connection the request came on closes or the Transport closes;
// a handler must return promptly then, since Close waits for it. The
// caller's deadline is not carried over the wire. A handler that panics is
// recovered: the panic is logged and the caller gets a *RemoteError.
type Handler func(ctx context.Context, method uint8, req []byte) ([]byte, error)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout      = 2 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultMaxConns         = 512
	DefaultMaxConnsPerPeer  = 64
)

// Per-connection limits.
const (
	// maxConnsPerPeer is how many RPC connections Call keeps to one address.
	maxConnsPerPeer = 2
	// maxInflightPerConn bounds the requests a server runs at once for one
	// connection; past it the server stops reading that connection until a
	// handler returns (backpressure through TCP).
	maxInflightPerConn = 256
	// readBufSize is the bufio.Reader size for RPC connections.
	readBufSize = 16 << 10
)

// Config configures a Transport. New validates it; nothing in it can be
// changed afterwards.
type Config struct {
	// BindAddr is the TCP address (host:port) to listen on, for example
	// "127.0.0.1:7400". Port 0 picks a free port (tests). Required.
	BindAddr string
	// AdvertiseAddr is the address peers dial to reach this transport: an
	// IP:port whose IP is not unspecified (not 0.0.0.0 or ::) and whose port
	// is not 0. Default: the listener's actual address, which requires
	// BindAddr to name a specific IP.
	AdvertiseAddr string
	// Handler serves inbound RPCs. Required.
	Handler Handler
	// MaxFrameSize bounds the length prefix of every RPC frame this
	// transport reads or writes (9 header bytes plus the payload). A
	// connection that declares a longer inbound frame is closed; a Call
	// whose request would not fit fails with ErrFrameTooLarge. Default
	// DefaultMaxFrameSize (1 MiB); allowed MinMaxFrameSize to MaxMaxFrameSize.
	MaxFrameSize int
	// DialTimeout bounds connecting to a peer (and writing the stream byte),
	// within the caller's context. Default DefaultDialTimeout (2s).
	DialTimeout time.Duration
	// HandshakeTimeout is how long an accepted connection has to send its
	// stream byte (with TLS: to complete the TLS handshake and send its
	// stream byte) before it is closed (slow loris), and how long a raft
	// stream waits for StreamLayer.Accept. Default DefaultHandshakeTimeout (5s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes RPC connections with no call in flight: Call's
	// pooled connections after IdleTimeout, served ones after twice that
	// (so the dialing side, which knows whether it is about to send, closes
	// first). It also bounds how long a single frame write may stall.
	// Default DefaultIdleTimeout (2m).
	IdleTimeout time.Duration
	// MaxConns bounds the inbound connections open at once (raft and RPC,
	// including those still in the handshake). Connections beyond it are
	// closed as soon as they are accepted, logged and counted. Default
	// DefaultMaxConns (512).
	MaxConns int
	// MaxConnsPerPeer bounds the inbound connections open at once from one
	// remote IPv4 address or IPv6 /64, so one host flooding the port cannot take every
	// MaxConns slot from the rest of the cluster. Connections beyond it are
	// closed as soon as they are accepted, logged and counted. A peer needs
	// a few (raft's pool and raftpace's RPC pool). Default
	// DefaultMaxConnsPerPeer (64); at most MaxConns.
	MaxConnsPerPeer int
	// TLS, when set, runs every connection over mutual TLS 1.3 with the
	// cluster CA (see TLSConfig for the trust model). The TLS handshake comes
	// first and the stream byte inside it. Peers must agree: a TLS transport
	// refuses plaintext dialers and a transport without TLS refuses TLS
	// dialers, each with a log line naming the remote address. Default: nil
	// (plaintext).
	TLS *TLSConfig
	// Logger receives the transport's logs. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns cfg with zero values replaced by defaults.
func (cfg Config) withDefaults() Config {
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerPeer == 0 {
		cfg.MaxConnsPerPeer = min(DefaultMaxConnsPerPeer, cfg.MaxConns)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate reports every problem with cfg (defaults already applied).
func (cfg Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("transport: config: "+format, args...))
	}
	bindUnspecified := false
	if cfg.BindAddr == "" {
		bad("BindAddr is required (host:port)")
	} else if host, port, err := net.SplitHostPort(cfg.BindAddr); err != nil {
		bad("BindAddr %q must be host:port: %w", cfg.BindAddr, err)
	} else {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("BindAddr %q: port %q must be a number from 0 to 65535", cfg.BindAddr, port)
		}
		if host == "" {
			bindUnspecified = true
		} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
			bindUnspecified = true
		}
	}
	if cfg.AdvertiseAddr != "" {
		if ap, err := netip.ParseAddrPort(cfg.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr %q must be IP:port: %w", cfg.AdvertiseAddr, err)
		} else {
			if ap.Addr().IsUnspecified() {
				bad("AdvertiseAddr %q: IP must not be unspecified", cfg.AdvertiseAddr)
			}
			if ap.Port() == 0 {
				bad("AdvertiseAddr %q: port must not be 0", cfg.AdvertiseAddr)
			}
		}
	} else if bindUnspecified {
		bad("AdvertiseAddr is required when BindAddr %q does not name a specific IP", cfg.BindAddr)
	}
	if cfg.Handler == nil {
		bad("Handler is required")
	}
	if cfg.MaxFrameSize < MinMaxFrameSize || cfg.MaxFrameSize > MaxMaxFrameSize {
		bad("MaxFrameSize %d must be 0 (default %d) or from %d to %d", cfg.MaxFrameSize, DefaultMaxFrameSize, MinMaxFrameSize, MaxMaxFrameSize)
	}
	if cfg.DialTimeout < 0 {
		bad("DialTimeout %v must not be negative", cfg.DialTimeout)
	}
	if cfg.HandshakeTimeout < 0 {
		bad("HandshakeTimeout %v must not be negative", cfg.HandshakeTimeout)
	}
	if cfg.IdleTimeout < 0 {
		bad("IdleTimeout %v must not be negative", cfg.IdleTimeout)
	}
	if cfg.MaxConnsPerPeer < 0 || cfg.MaxConnsPerPeer > cfg.MaxConns {
		bad("MaxConnsPerPeer %d must be 0 (default) or 1..MaxConns (%d)", cfg.MaxConnsPerPeer, cfg.MaxConns)
	}
	if cfg.MaxConns < 0 {
		bad("MaxConns %d must not be negative", cfg.MaxConns)
	}
	if cfg.TLS != nil {
		if err := cfg.TLS.Check(); err != nil {
			bad("TLS.Cert: %w", err)
		}
	}
	return errors.Join(errs...)
}

// Transport is one node's TCP endpoint: a listener whose connections carry
// either raft traffic (through StreamLayer) or raftpace RPC (Call and
// Config.Handler), told apart by their first byte. Build it with New; all
// methods are safe for concurrent use. Close releases everything.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	ln   net.Listener
	addr *net.TCPAddr

	ctx    context.Context // cancelled by Close; parent of handler contexts
	cancel context.CancelFunc
	closed chan struct{} // closed by Close

	mu       sync.Mutex
	isClosed bool
	conns    map[*trackedConn]struct{} // every open connection, both directions
	perPeer  map[netip.Addr]int        // inbound connections open, by remote IP

	wg        sync.WaitGroup // every goroutine the transport started
	closeOnce sync.Once
	closeErr  error

	peers sync.Map // string -> *peer
	raft  *streamLayer
	epoch time.Time // base for monotonic timestamps

	// With Config.TLS: the accepting and the dialing side's TLS settings.
	tlsServer, tlsClient *tls.Config

	stats counters

	rejectLog, peerLog sampledLog // a flood must not flood the logs too
}

// New validates cfg, listens on cfg.BindAddr and starts accepting
// connections. The returned Transport serves RPCs at once; raft streams wait
// for StreamLayer().Accept.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on BindAddr %q: %w", cfg.BindAddr, err)
	}
	var addr *net.TCPAddr
	if cfg.AdvertiseAddr != "" {
		addr = net.TCPAddrFromAddrPort(netip.MustParseAddrPort(cfg.AdvertiseAddr))
	} else {
		addr = ln.Addr().(*net.TCPAddr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "transport", "addr", addr.String()),
		ln:     ln,
		addr:   addr,
		ctx:    ctx,
		cancel: cancel,
		closed: make(chan struct{}),
		conns:  make(map[*trackedConn]struct{}),
		epoch:  time.Now(),
	}
	if cfg.TLS != nil {
		t.tlsServer, t.tlsClient = cfg.TLS.serverTLS(), cfg.TLS.clientTLS()
	}
	t.raft = &streamLayer{t: t, ch: make(chan net.Conn), done: make(chan struct{})}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr returns the address peers should dial: Config.AdvertiseAddr, or the
// listener's actual address.
func (t *Transport) Addr() net.Addr { return t.addr }

// Close closes the listener and every connection (inbound, pooled outbound,
// raft streams in both directions), fails calls in flight with ErrClosed,
// cancels handler contexts, and returns once every goroutine the Transport
// started has ended (so it waits for running handlers). It is idempotent;
// later calls return the first call's result.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.isClosed = true
		conns := make([]*trackedConn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()

		close(t.closed)
		t.cancel()
		if err := t.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.closeErr = fmt.Errorf("transport: close listener: %w", err)
		}
		for _, c := range conns {
			_ = c.Close()
		}
		t.wg.Wait()
	})
	return t.closeErr
}

// closing reports whether Close has started.
func (t *Transport) closing() bool {
	select {
	case <-t.closed:
		return true
	default:
		return false
	}
}

// goTracked starts f as a transport goroutine unless the transport is
// closed; it reports whether f was started. It is for goroutines started
// from outside the transport's own goroutines (whose wg count keeps Add legal).
func (t *Transport) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isClosed {
		return false
	}
	t.wg.Go(f)
	return true
}

// now returns a monotonic timestamp.
func (t *Transport) now() time.Duration { return time.Since(t.epoch) }

// trackedConn is every connection the transport owns: Close closes them all.
// Its Close is idempotent and releases the connection's MaxConns slot.
// Conn is what streams read and write (the TLS connection with TLS); raw
// is the TCP connection under it, which Close closes (so Close never waits
// on a TLS write, and an accepted connection's Conn may be replaced by its
// TLS connection while Close runs).
type trackedConn struct {
	net.Conn
	raw     net.Conn
	t       *Transport
	inbound bool
	peer    netip.Addr // inbound: the remote IP counted in perPeer
	once    sync.Once
	err     error
}

// track wraps c and registers it; if the transport is closed it closes c and
// returns ErrClosed. raw is the TCP connection under c (c itself without TLS).
func (t *Transport) track(c, raw net.Conn, inbound bool) (*trackedConn, error) {
	tc := &trackedConn{Conn: c, raw: raw, t: t, inbound: inbound}
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		_ = c.Close()
		return nil, ErrClosed
	}
	if inbound {
		tc.peer = remoteIP(c)
		if t.perPeer == nil {
			t.perPeer = make(map[netip.Addr]int)
		}
		if t.perPeer[tc.peer] >= t.cfg.MaxConnsPerPeer {
			t.mu.Unlock()
			_ = c.Close()
			return nil, errPeerLimit
		}
		t.perPeer[tc.peer]++
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	if inbound {
		t.stats.connsIn.Add(1)
	} else {
		t.stats.connsOut.Add(1)
	}
	return tc, nil
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.err = c.raw.Close()
		c.t.mu.Lock()
		delete(c.t.conns, c)
		if c.inbound {
			if c.t.perPeer[c.peer]--; c.t.perPeer[c.peer] <= 0 {
				delete(c.t.perPeer, c.peer)
			}
		}
		c.t.mu.Unlock()
		if c.inbound {
			c.t.stats.connsIn.Add(-1)
		} else {
			c.t.stats.connsOut.Add(-1)
		}
	})
	return c.err
}

// acceptLoop is the one place connections are accepted; handshake then
// runs TLS (with Config.TLS) and reads the stream byte.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.closing() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failure such as EMFILE: back off like net/http.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Error("transport: accept failed; retrying", "err", err, "delay", delay)
			tm := time.NewTimer(delay)
			select {
			case <-tm.C:
			case <-t.closed:
				tm.Stop()
				return
			}
			continue
		}
		delay = 0
		// Only this goroutine adds to connsIn, so the check cannot be raced
		// past the limit.
		if t.stats.connsIn.Load() >= int64(t.cfg.MaxConns) {
			t.stats.rejectedConns.Add(1)
			t.rejectLog.warn(t.log, "transport: too many connections; closing new ones (logged at most once a second)",
				"remote", c.RemoteAddr().String(), "max_conns", t.cfg.MaxConns)
			_ = c.Close()
			continue
		}
		remote := c.RemoteAddr().String()
		tc, err := t.track(c, c, true)
		if errors.Is(err, errPeerLimit) {
			t.stats.rejectedPeer.Add(1)
			t.peerLog.warn(t.log, "transport: too many connections from one peer; closing new ones (logged at most once a second)",
				"remote", remote, "max_conns_per_peer", t.cfg.MaxConnsPerPeer)
			continue
		}
		if err != nil {
			return
		}
		t.stats.accepted.Add(1)
		t.wg.Go(func() { t.handshake(tc) })
	}
}

// handshake reads the stream byte of an accepted connection, after the TLS
// handshake with Config.TLS, and hands the connection to its stream. All of
// it must happen within HandshakeTimeout.
func (t *Transport) handshake(c *trackedConn) {
	remote := c.RemoteAddr().String()
	_ = c.raw.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var b [1]byte
	if _, err := io.ReadFull(c.raw, b[:]); err != nil {
		t.handshakeFailed(c, remote, "no stream byte", err)
		return
	}
	switch {
	case t.tlsServer != nil && b[0] != tlsRecordHandshake:
		t.stats.rejectedTLS.Add(1)
		t.log.Warn("transport: plaintext connection from "+remote+": this cluster requires TLS; refusing it",
			"remote", remote, "byte", fmt.Sprintf("%#02x", b[0]))
		t.refusePlaintext(c)
		return
	case t.tlsServer == nil && b[0] == tlsRecordHandshake:
		t.stats.rejectedTLS.Add(1)
		t.log.Warn("transport: TLS handshake from "+remote+" but this node has no TLS configured; refusing it",
			"remote", remote)
		t.lingerClose(c)
		return
	case t.tlsServer != nil:
		tc := tls.Server(&prefixConn{Conn: c.raw, first: []byte{b[0]}}, t.tlsServer)
		if err := tc.HandshakeContext(t.ctx); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || t.closing() {
				t.handshakeFailed(c, remote, "no TLS handshake", err)
				return
			}
			t.stats.rejectedTLS.Add(1)
			if isRemoteAlert(err) {
				t.log.Warn("transport: TLS handshake from "+remote+" failed: the peer refused this node's certificate (is it signed by the peer's cluster CA?); closing",
					"remote", remote, "err", err)
			} else {
				t.log.Warn("transport: TLS handshake from "+remote+" refused; closing", "remote", remote, "err", err)
			}
			t.lingerClose(c)
			return
		}
		c.Conn = tc // before the handoff: no other goroutine reads Conn yet
		if _, err := io.ReadFull(tc, b[:]); err != nil {
			t.handshakeFailed(c, remote, "no stream byte", err)
			return
		}
		if b[0] == streamRaft || b[0] == streamRPC {
			// Echo the stream byte: the dialer learns that its certificate
			// was accepted (TLS 1.3 dialers finish their handshake before
			// the server has checked it).
			if _, err := tc.Write(b[:]); err != nil {
				t.handshakeFailed(c, remote, "stream byte not acknowledged", err)
				return
			}
		}
	}
	_ = c.raw.SetDeadline(time.Time{})
	switch b[0] {
	case streamRaft:
		t.raft.handoff(c)
	case streamRPC:
		t.serveRPC(c)
	default:
		t.stats.rejectedStream.Add(1)
		t.log.Warn("transport: unknown stream byte; closing",
			"remote", remote, "byte", fmt.Sprintf("%#02x", b[0]))
		_ = c.Close()
	}
}

// handshakeFailed logs and closes a connection that ended or timed out
// before its stream was selected.
func (t *Transport) handshakeFailed(c *trackedConn, remote, what string, err error) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.stats.rejectedHandshake.Add(1)
		t.log.Warn("transport: "+what+" before handshake timeout; closing",
			"remote", remote, "timeout", t.cfg.HandshakeTimeout)
	case t.closing():
	default:
		t.log.Debug("transport: connection closed before its stream was selected",
			"remote", remote, "stage", what, "err", err)
	}
	_ = c.Close()
}

// dial is the one place outbound connections are made: it connects to addr
// within ctx and DialTimeout (cancelled by Close too), runs the TLS handshake
// (with Config.TLS), writes the stream byte and registers the connection.
// With TLS it also waits for the peer's echo of the stream byte, so that a
// peer refusing this node's certificate fails the dial, not a later read.
func (t *Transport) dial(ctx context.Context, addr string, stream byte, timeout time.Duration) (*trackedConn, error) {
	if t.closing() {
		return nil, ErrClosed
	}
	if timeout <= 0 {
		timeout = t.cfg.DialTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()

	t.stats.dials.Add(1)
	var conn net.Conn
	raw, err := t.dialer().DialContext(dctx, "tcp", addr)
	if err == nil {
		if t.tlsClient != nil {
			conn, err = t.dialTLS(dctx, raw, stream)
		} else {
			conn = raw
			if dl, ok := dctx.Deadline(); ok {
				_ = raw.SetWriteDeadline(dl)
			}
			if _, err = raw.Write([]byte{stream}); err == nil {
				err = raw.SetWriteDeadline(time.Time{})
			}
		}
		if err != nil {
			_ = raw.Close()
		}
	}
	if err != nil {
		t.stats.dialErrors.Add(1)
		switch {
		case t.closing():
			return nil, fmt.Errorf("transport: dial %s: %w", addr, ErrClosed)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("transport: dial %s: %w", addr, ctx.Err())
		case dctx.Err() != nil && !errors.Is(err, ErrTLS):
			return nil, fmt.Errorf("transport: dial %s: timed out after %v: %w", addr, timeout, dctx.Err())
		}
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	tc, err := t.track(conn, raw, false)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return tc, nil
}

// dialTLS runs the client side of the TLS handshake on raw, writes the
// stream byte and waits for the peer to echo it, all within dctx.
func (t *Transport) dialTLS(dctx context.Context, raw net.Conn, stream byte) (net.Conn, error) {
	tc := tls.Client(raw, t.tlsClient)
	if err := tc.HandshakeContext(dctx); err != nil {
		return nil, explainHandshake(err)
	}
	if dl, ok := dctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// Close (or the caller) cancelling dctx ends the wait at once.
	stopWait := context.AfterFunc(dctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	var b [1]byte
	_, err := tc.Write([]byte{stream})
	if err == nil {
		_, err = io.ReadFull(tc, b[:])
	}
	if !stopWait() {
		// dctx ended: the deadline was (or is being) moved into the past.
		return nil, errors.Join(dctx.Err(), err)
	}
	if err != nil {
		return nil, explainAccept(err)
	}
	if b[0] != stream {
		return nil, fmt.Errorf("%w: the peer answered stream byte %#02x with %#02x", ErrTLS, stream, b[0])
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}

// Stats is a snapshot of a Transport's counters. Counts are since New;
// Conns* are current values.
type Stats struct {
	// Accepted counts inbound connections admitted under MaxConns.
	Accepted uint64
	// Rejected is the sum of the Rejected* counts: inbound connections the
	// transport closed because they broke a rule.
	Rejected uint64
	// RejectedStream: bad first byte, or a raft stream nobody Accepted
	// within HandshakeTimeout.
	RejectedStream uint64
	// RejectedConns: accepted while MaxConns connections were open.
	RejectedConns uint64
	// RejectedFrame: an inbound RPC frame with an oversize or undersize
	// length, or cut short by the end of the stream.
	RejectedFrame uint64
	// RejectedHandshake: no stream byte within HandshakeTimeout.
	RejectedHandshake uint64
	// RejectedPeer: accepted while MaxConnsPerPeer connections from the
	// same IP were open.
	RejectedPeer uint64
	// RejectedTLS: a plaintext dialer on a TLS transport, a TLS dialer on a
	// transport without TLS, or a TLS handshake that failed (a certificate
	// not signed by the cluster CA, none at all, an old TLS version).
	// Handshakes that time out count in RejectedHandshake.
	RejectedTLS uint64

	// ConnsIn and ConnsOut are the connections open now, raft and RPC.
	ConnsIn, ConnsOut int64
	// Dials and DialErrors count outbound connection attempts (raft and RPC).
	Dials, DialErrors uint64

	// CallsIn counts requests received; HandlerErrors those whose handler
	// returned an error (or panicked).
	CallsIn, HandlerErrors uint64
	// CallsOut counts Calls made; CallErrors those that returned an error
	// of any kind (remote, context, connection).
	CallsOut, CallErrors uint64
}

type counters struct {
	accepted, rejectedStream, rejectedConns, rejectedFrame, rejectedHandshake atomic.Uint64
	rejectedPeer, rejectedTLS                                                 atomic.Uint64
	connsIn, connsOut                                                         atomic.Int64
	dials, dialErrors                                                         atomic.Uint64
	callsIn, handlerErrors                                                    atomic.Uint64
	callsOut, callErrors                                                      atomic.Uint64
}

// Stats returns a snapshot of the transport's counters.
func (t *Transport) Stats() Stats {
	c := &t.stats
	s := Stats{
		Accepted:          c.accepted.Load(),
		RejectedStream:    c.rejectedStream.Load(),
		RejectedConns:     c.rejectedConns.Load(),
		RejectedFrame:     c.rejectedFrame.Load(),
		RejectedHandshake: c.rejectedHandshake.Load(),
		RejectedPeer:      c.rejectedPeer.Load(),
		RejectedTLS:       c.rejectedTLS.Load(),
		ConnsIn:           c.connsIn.Load(),
		ConnsOut:          c.connsOut.Load(),
		Dials:             c.dials.Load(),
		DialErrors:        c.dialErrors.Load(),
		CallsIn:           c.callsIn.Load(),
		HandlerErrors:     c.handlerErrors.Load(),
		CallsOut:          c.callsOut.Load(),
		CallErrors:        c.callErrors.Load(),
	}
	s.Rejected = s.RejectedStream + s.RejectedConns + s.RejectedFrame + s.RejectedHandshake + s.RejectedPeer + s.RejectedTLS
	return s
}

// dialer connects from the listener's IP when it is a specific one (not
// 0.0.0.0 or ::), so peers see a node's connections come from the address it
// listens on: on a multi-homed host the cluster traffic stays on the
// cluster's network, and a firewall rule on that address cuts both ways.
func (t *Transport) dialer() *net.Dialer {
	d := &net.Dialer{}
	if a, ok := t.ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		d.LocalAddr = &net.TCPAddr{IP: a.IP}
	}
	return d
}

// errPeerLimit: a peer already has MaxConnsPerPeer inbound connections.
var errPeerLimit = errors.New("transport: too many connections from one peer")

// remoteIP is the peer a connection counts against in MaxConnsPerPeer: its
// IPv4 address, or its IPv6 /64 (one host commonly holds a whole /64, so
// counting single IPv6 addresses would not bound it); the zero Addr if the
// connection is not TCP.
func remoteIP(c net.Conn) netip.Addr {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	a := ta.AddrPort().Addr().Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// sampledLog writes a warning at most once a second, with the number of
// occurrences it left out since the last one.
type sampledLog struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *sampledLog) warn(log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	log.Warn(msg, append(args, "not_logged_since_last", dropped)...)
}
