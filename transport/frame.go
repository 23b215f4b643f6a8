package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Stream selectors: the first byte a dialer writes on a new connection.
const (
	streamRaft byte = 0x01
	streamRPC  byte = 0x02
)

// Response statuses, carried in the method-or-status byte of a response.
const (
	statusOK    uint8 = 0
	statusError uint8 = 1
)

const (
	// lenSize is the size of the length prefix.
	lenSize = 4
	// headerSize is the part of a frame the length prefix counts besides the
	// payload: request id (8) and method-or-status (1).
	headerSize = 9

	// DefaultMaxFrameSize is Config.MaxFrameSize's default.
	DefaultMaxFrameSize = 1 << 20
	// MinMaxFrameSize and MaxMaxFrameSize bound Config.MaxFrameSize.
	MinMaxFrameSize = 256
	MaxMaxFrameSize = 1 << 30
)

// frame is one decoded RPC frame. payload aliases a buffer allocated for this
// frame alone, so it may be kept.
type frame struct {
	id      uint64
	code    uint8 // method (requests) or status (responses)
	payload []byte
}

// readFrame reads one frame from br, allowing a length prefix of at most
// maxLen. It returns io.EOF only when the stream ends cleanly between
// frames. A length above maxLen yields ErrFrameTooLarge and a length below
// the header size, or a stream that ends inside a frame, ErrBadFrame; in
// both cases the declared length is checked before anything is allocated,
// and br is left in an unspecified position (the caller closes the
// connection). Other errors are br's read errors (deadline, reset).
func readFrame(br *bufio.Reader, maxLen int) (frame, error) {
	h, err := br.Peek(lenSize)
	if err != nil {
		if errors.Is(err, io.EOF) && len(h) > 0 {
			return frame{}, fmt.Errorf("%w: stream ended inside the length prefix (%d of %d bytes)", ErrBadFrame, len(h), lenSize)
		}
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h)
	if uint64(n) > uint64(maxLen) {
		return frame{}, fmt.Errorf("%w: length %d exceeds limit %d", ErrFrameTooLarge, n, maxLen)
	}
	if n < headerSize {
		return frame{}, fmt.Errorf("%w: length %d shorter than the %d-byte header", ErrBadFrame, n, headerSize)
	}
	if _, err := br.Discard(lenSize); err != nil {
		return frame{}, err // cannot happen: the bytes were peeked
	}
	// The buffer grows with the bytes that arrive, not with the length the
	// peer declared: a few bytes claiming a 1 MiB frame must not pin 1 MiB.
	// Growth doubles, so a frame costs at most twice its size in copies.
	buf := make([]byte, min(int(n), frameChunk))
	got := 0
	for {
		m, err := io.ReadFull(br, buf[got:])
		got += m
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return frame{}, fmt.Errorf("%w: stream ended inside a frame (%d of %d bytes)", ErrBadFrame, got, n)
			}
			return frame{}, err
		}
		if got == int(n) {
			break
		}
		buf = append(buf, make([]byte, min(int(n), 2*len(buf))-len(buf))...)
	}
	return frame{
		id:      binary.BigEndian.Uint64(buf),
		code:    buf[8],
		payload: buf[headerSize:],
	}, nil
}

// frameChunk is the first buffer readFrame allocates for a frame's body.
const frameChunk = 16 << 10

// frameSize is the number of bytes a frame with a payload of n bytes takes
// on the wire, length prefix included.
func frameSize(n int) int { return lenSize + headerSize + n }

// appendFrame appends the encoding of one frame to dst. The caller has
// checked that headerSize+len(payload) fits the peer's limit.
func appendFrame(dst []byte, id uint64, code uint8, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(headerSize+len(payload)))
	dst = binary.BigEndian.AppendUint64(dst, id)
	dst = append(dst, code)
	return append(dst, payload...)
}

// maxPooledBuf: write buffers larger than this are left to the GC rather
// than kept in the pool, so one large frame does not pin memory.
const maxPooledBuf = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
