package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/raftpace/raftpace/client"
)

// Loopback is not a pacer: each reservation is one bare round trip of one
// byte over one TCP connection to an echo server on loopback, shared by
// the process's callers behind a mutex (like the Postgres and Redis
// pacers), and grants at once. It measures the floor of every design that
// asks another process per reservation: no remote pacer can answer faster
// on this machine.
type Loopback struct {
	grace time.Duration

	mu   sync.Mutex
	conn net.Conn
	buf  [1]byte
}

// DialLoopback connects to the echo server at addr.
func DialLoopback(ctx context.Context, addr string, grace time.Duration) (*Loopback, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: loopback: %w", err)
	}
	return &Loopback{grace: grace, conn: c}, nil
}

// ReserveN does one round trip and grants n events now.
func (l *Loopback) ReserveN(_ context.Context, key string, n int, _ time.Duration) (client.Reservation, error) {
	l.mu.Lock()
	sent := time.Now()
	_, err := l.conn.Write(l.buf[:])
	if err == nil {
		_, err = io.ReadFull(l.conn, l.buf[:])
	}
	arrived := time.Now()
	l.mu.Unlock()
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: loopback: reserve %q: %w", key, err)
	}
	return remoteGrant(sent, arrived, 0, l.grace), nil
}

// Forfeit does nothing.
func (l *Loopback) Forfeit(client.Reservation) {}

// Close closes the connection.
func (l *Loopback) Close() error { return l.conn.Close() }

// EchoServer answers every byte it reads with the same byte, on loopback,
// until Close: the other end of Loopback's connections.
type EchoServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

// StartEcho starts an echo server on a free port of 127.0.0.1.
func StartEcho() (*EchoServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: echo server: %w", err)
	}
	s := &EchoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			})
		}
	})
	return s, nil
}

// Addr is the server's host:port.
func (s *EchoServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its connections to end.
func (s *EchoServer) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
