package transport

import (
	"errors"
	"net"
	"net/netip"
	"sync"
)

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
