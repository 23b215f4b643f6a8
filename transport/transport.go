package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
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

	handler atomic.Pointer[Handler] // nil until Config.Handler or Serve

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
// Serve installs (or replaces) the handler of inbound RPCs; requests that
// arrive after it returns are served by h.
func (t *Transport) Serve(h Handler) { t.handler.Store(&h) }

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
	if cfg.Handler != nil {
		t.Serve(cfg.Handler)
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
