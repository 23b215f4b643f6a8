package transport

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer returns the raft.StreamLayer that carries raft traffic over
// this transport's port: give it to raft.NewNetworkTransport. Dial opens a
// connection whose first byte selects the raft stream; Accept returns
// inbound connections that selected it, with that byte consumed. Its Close
// stops Accept (and refuses later raft streams) but leaves RPC running;
// Transport.Close closes raft connections too. The same value is returned
// every time.
func (t *Transport) StreamLayer() raft.StreamLayer { return t.raft }

// streamLayer implements raft.StreamLayer.
type streamLayer struct {
	t    *Transport
	ch   chan net.Conn // unbuffered: handoff blocks until Accept takes it
	once sync.Once
	done chan struct{} // closed by Close
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// Accept waits for the next inbound raft connection.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.ch:
		return c, nil
	case <-s.done:
	case <-s.t.closed:
	}
	return nil, fmt.Errorf("transport: raft accept: %w: %w", ErrClosed, net.ErrClosed)
}

// Close stops Accept. It is idempotent and does not close the Transport.
func (s *streamLayer) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// Addr returns the transport's advertise address.
func (s *streamLayer) Addr() net.Addr { return s.t.addr }

// Dial connects to a peer's transport and selects its raft stream. A zero
// timeout means Config.DialTimeout.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.done:
		return nil, fmt.Errorf("transport: raft dial %s: %w", address, ErrClosed)
	default:
	}
	c, err := s.t.dial(s.t.ctx, string(address), streamRaft, timeout)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// handoff passes an inbound raft connection to Accept, or closes it if
// nobody accepts it within HandshakeTimeout.
func (s *streamLayer) handoff(c *trackedConn) {
	tm := time.NewTimer(s.t.cfg.HandshakeTimeout)
	defer tm.Stop()
	select {
	case s.ch <- c:
		return
	case <-tm.C:
		s.t.stats.rejectedStream.Add(1)
		s.t.log.Warn("transport: raft stream not accepted within handshake timeout; closing",
			"remote", c.RemoteAddr().String(), "timeout", s.t.cfg.HandshakeTimeout)
	case <-s.done:
		s.t.stats.rejectedStream.Add(1)
		s.t.log.Warn("transport: raft stream refused: stream layer closed",
			"remote", c.RemoteAddr().String())
	case <-s.t.closed:
	}
	_ = c.Close()
}
