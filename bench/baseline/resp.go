package baseline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// respConn is a minimal RESP2 client: one connection, one command at a
// time (the caller serialises), enough for PING, SCRIPT LOAD and EVALSHA.
// It replaces a dependency on go-redis for the few commands the bench
// sends.
type respConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// respError is an error reply ("-ERR ...", "-NOSCRIPT ...").
type respError string

func (e respError) Error() string { return "redis: " + string(e) }

// maxBulk bounds a bulk reply the client accepts (the bench's are tiny).
const maxBulk = 1 << 20

func dialRESP(ctx context.Context, addr string) (*respConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &respConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (c *respConn) Close() error { return c.c.Close() }

// do sends one command and reads its reply: a string (simple string), an
// int64, a []byte (bulk; nil for a null bulk), a []any (array; nil for a
// null array) or a respError. ctx's deadline, if any, bounds the exchange.
func (c *respConn) do(ctx context.Context, args ...string) (any, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.c.SetDeadline(dl)
	} else {
		c.c.SetDeadline(time.Time{})
	}
	c.w.WriteByte('*')
	c.w.WriteString(strconv.Itoa(len(args)))
	c.w.WriteString("\r\n")
	for _, a := range args {
		c.w.WriteByte('$')
		c.w.WriteString(strconv.Itoa(len(a)))
		c.w.WriteString("\r\n")
		c.w.WriteString(a)
		c.w.WriteString("\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	v, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	if e, ok := v.(respError); ok {
		return nil, e
	}
	return v, nil
}

// line reads one CRLF-terminated line without its CRLF.
func (c *respConn) line() ([]byte, error) {
	b, err := c.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return nil, errors.New("malformed reply line")
	}
	return b[:len(b)-2], nil
}

func (c *respConn) read() (any, error) {
	b, err := c.line()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty reply line")
	}
	body := string(b[1:])
	switch b[0] {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad integer reply %q", body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulk {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n == -1 {
			return []byte(nil), nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errors.New("bulk reply not CRLF-terminated")
		}
		return buf[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1024 {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n == -1 {
			return []any(nil), nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", b[0])
}
