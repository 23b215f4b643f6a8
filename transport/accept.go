package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

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
