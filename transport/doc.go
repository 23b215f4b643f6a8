// Package transport gives a raftpace node one TCP port that carries both
// its raft traffic and raftpace's own request/response RPC.
//
// A Transport listens on Config.BindAddr. Raft uses it through StreamLayer,
// which plugs into raft.NewNetworkTransport; raftpace code uses Call to send
// a request to another node and Config.Handler to serve requests from
// others. Peers are addressed by the host:port they advertise (Addr), never
// by IP alone, so several nodes can share a host.
//
//	t, err := transport.New(transport.Config{
//		BindAddr: "127.0.0.1:7400",
//		Handler: func(ctx context.Context, method uint8, req []byte) ([]byte, error) {
//			return serve(ctx, method, req) // application-defined methods
//		},
//		Logger: logger,
//	})
//	if err != nil { ... }
//	defer t.Close()
//	rt := raft.NewNetworkTransport(t.StreamLayer(), 3, 10*time.Second, os.Stderr)
//	resp, err := t.Call(ctx, "127.0.0.1:7401", methodReserve, req)
//
// # Wire format
//
// The dialer's first byte on a new connection selects its stream:
//
//	0x01  raft: the rest of the connection belongs to raft's NetworkTransport
//	0x02  RPC: framed requests and responses, described below
//
// Any other first byte, or none within Config.HandshakeTimeout, gets the
// connection closed, logged at warn with the remote address, and counted
// in Stats.
//
// With Config.TLS the connection is mutual TLS 1.3 first (see TLSConfig for
// the trust model: any certificate the cluster CA signed is a member); the
// stream byte is the first byte inside TLS, and the accepting side echoes
// it once it has checked the dialer's certificate, so a dialer whose
// certificate is refused fails its dial with an error saying so. The TLS
// handshake and the stream byte together must fit in HandshakeTimeout. A
// plaintext dialer on a TLS node (first byte not 0x16) and a TLS dialer on
// a node without TLS are refused, logged ("plaintext connection from X:
// this cluster requires TLS", "TLS handshake from X but this node has no
// TLS configured") and counted in Stats.RejectedTLS; the dialer's error
// wraps ErrTLS and says which side lacks what.
//
// An RPC stream is a sequence of frames, each
//
//	[uint32 length][uint64 request id][uint8 method or status][payload]
//
// with every integer big-endian and length counting the bytes after itself
// (9 + len(payload)). Requests carry the application's method byte;
// responses echo the request id and carry status 0 (payload is the handler's
// response) or 1 (payload is the handler's error text, returned to the
// caller as *RemoteError). A length above Config.MaxFrameSize or below 9,
// or a stream that ends inside a frame, is a protocol violation: the reader
// closes the connection, logs and counts it. The declared length is checked
// before anything is allocated for the frame.
//
// Connections are multiplexed. Call keeps at most two connections per peer
// address, dialled on demand, and matches responses to callers by request
// id, so many concurrent Calls share them and responses may arrive in any
// order. The server runs each request in its own goroutine, at most 256 at
// once per connection (past that it stops reading, and TCP pushes back), and
// writes each response as one frame under a per-connection lock. A handler
// about to wait rather than work calls Park: it leaves the 256 for a bound
// of 16,384 parked requests per connection.
//
// # Promises
//
//   - One port: raft and RPC share Config.BindAddr.
//   - Call honours its context: when ctx ends first, Call returns the
//     context's error (wrapped) at once and the late response is dropped.
//   - A broken connection fails every call waiting on it with ErrConnLost
//     and leaves the pool; the next Call redials. Call retries on another
//     connection only when nothing of the request was written.
//   - Limits: MaxFrameSize per frame, MaxConns inbound connections,
//     MaxConnsPerPeer from one IP, HandshakeTimeout for the TLS handshake
//     and the stream byte, IdleTimeout for idle RPC
//     connections (the dialler closes at IdleTimeout, the server at twice
//     that) and for a stalled frame write.
//   - Close is idempotent, closes every connection in both directions, and
//     returns only when every goroutine the Transport started has ended.
//   - Counters are per Transport (Stats); nothing is package-global.
//
// A frame on an existing connection is built in one pooled buffer and
// written with one write call; reads go through a bufio.Reader.
//
// Without Config.TLS nothing is encrypted or authenticated: anyone who can
// reach the port is a peer.
package transport
