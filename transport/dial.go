package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

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
