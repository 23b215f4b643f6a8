package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// serverConn is the serving side of one inbound RPC connection.
type serverConn struct {
	t        *Transport
	c        *trackedConn
	wmu      sync.Mutex // serializes response writes
	inflight atomic.Int32
}

// serveRPC reads requests from c until it closes, breaks a rule or idles
// out, running each in its own goroutine (at most maxInflightPerConn at
// once, besides those parked: Park). It closes c before returning;
// handlers still running see their context cancelled and their responses
// dropped.
func (t *Transport) serveRPC(c *trackedConn) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	defer c.Close()
	sc := &serverConn{t: t, c: c}
	sem := make(chan struct{}, maxInflightPerConn)
	parked := make(chan struct{}, maxParkedPerConn)
	br := bufio.NewReaderSize(c.Conn, readBufSize)
	idle := 2 * t.cfg.IdleTimeout
	maxLen := t.cfg.MaxFrameSize
	remote := c.RemoteAddr().String()

	// Between frames a connection may idle for idle (its pooled peer has
	// nothing to send), but the first request must start within
	// HandshakeTimeout: Call dials a connection only to send one, so one
	// that sends its stream byte and then nothing is a slow loris. Once a
	// frame has started, the rest must follow within frameTimeout, or a
	// peer could hold the connection (and the buffer) by sending a few
	// bytes now and then.
	first := true
	for {
		if br.Buffered() == 0 {
			wait := idle
			if first {
				wait = t.cfg.HandshakeTimeout
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			if _, err := br.Peek(1); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					if sc.inflight.Load() > 0 {
						continue
					}
					t.log.Debug("transport: closing idle RPC connection", "remote", remote, "first_frame", first)
					return
				}
				sc.readFailed(err, remote)
				return
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(min(idle, frameTimeout)))
		f, err := readFrame(br, maxLen)
		if err != nil {
			sc.readFailed(err, remote)
			return
		}
		first = false
		t.stats.callsIn.Add(1)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		sc.inflight.Add(1)
		// Adding from this goroutine is safe: it is itself counted in wg.
		t.wg.Add(1)
		pk := &parker{sem: sem, parked: parked}
		go func() {
			defer t.wg.Done()
			defer func() { sc.inflight.Add(-1); pk.release() }()
			sc.serve(context.WithValue(ctx, parkKey{}, pk), f)
		}()
	}
}

// frameTimeout bounds the reading of one frame once its first byte arrived.
// A 1 MiB frame at 100 KiB/s still fits. A variable for tests.
var frameTimeout = 10 * time.Second

// readFailed logs and counts why a served connection's read loop ended.
func (sc *serverConn) readFailed(err error, remote string) {
	t := sc.t
	switch {
	case errors.Is(err, io.EOF), t.closing():
		return
	case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrBadFrame):
		t.stats.rejectedFrame.Add(1)
		t.log.Warn("transport: bad RPC frame; closing connection", "remote", remote, "err", err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.stats.rejectedFrame.Add(1)
		t.log.Warn("transport: RPC frame stalled; closing connection", "remote", remote, "err", err)
	default:
		t.log.Debug("transport: RPC connection read failed", "remote", remote, "err", err)
	}
}

// serve runs the handler for one request and writes its response.
func (sc *serverConn) serve(ctx context.Context, f frame) {
	t := sc.t
	resp, err := sc.call(ctx, f)
	status := statusOK
	if err != nil {
		t.stats.handlerErrors.Add(1)
		status, resp = statusError, []byte(err.Error())
	}
	if headerSize+len(resp) > t.cfg.MaxFrameSize {
		if status == statusOK {
			t.stats.handlerErrors.Add(1)
			t.log.Warn("transport: response exceeds MaxFrameSize; sending an error instead",
				"method", f.code, "size", len(resp), "max_frame_size", t.cfg.MaxFrameSize)
			resp = fmt.Appendf(nil, "transport: response of %d bytes exceeds MaxFrameSize %d", len(resp), t.cfg.MaxFrameSize)
		}
		status = statusError
		resp = resp[:min(len(resp), t.cfg.MaxFrameSize-headerSize)]
	}

	bp := getBuf()
	*bp = appendFrame(*bp, f.id, status, resp)
	sc.wmu.Lock()
	_ = sc.c.SetWriteDeadline(time.Now().Add(t.cfg.IdleTimeout))
	_, werr := sc.c.Write(*bp)
	sc.wmu.Unlock()
	putBuf(bp)
	if werr != nil {
		if !t.closing() {
			t.log.Debug("transport: writing RPC response failed; closing connection",
				"remote", sc.c.RemoteAddr().String(), "err", werr)
		}
		_ = sc.c.Close() // the read loop sees the close and ends
	}
}

// call runs the handler, turning a panic into an error.
func (sc *serverConn) call(ctx context.Context, f frame) (resp []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			sc.t.log.Error("transport: handler panicked", "method", f.code, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("transport: handler for method %d panicked", f.code)
		}
	}()
	h := sc.t.handler.Load()
	if h == nil {
		return nil, ErrNotServing
	}
	return (*h)(ctx, f.code, f.payload)
}
