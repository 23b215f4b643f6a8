package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/fuzzcorpus"
)

// fuzzMaxFrame is the MaxFrameSize of the transports the fuzz targets run,
// the smallest allowed, so that the fuzzer reaches oversize frames easily.
const fuzzMaxFrame = MinMaxFrameSize

// mRemoteErr: fuzzHandler answers this method with an error whose text is
// the request, every other method with the request itself.
const mRemoteErr uint8 = 0xff

func fuzzHandler(_ context.Context, method uint8, req []byte) ([]byte, error) {
	if method == mRemoteErr {
		return nil, errors.New(string(req))
	}
	return req, nil
}

// wireFrames splits an RPC stream (after the stream byte) the way the
// format says, independently of readFrame: the complete frames up to the
// first violation, and that violation (nil if the stream ends cleanly
// between frames).
func wireFrames(b []byte, maxLen int) (frames []frame, tail error) {
	for len(b) > 0 {
		if len(b) < lenSize {
			return frames, ErrBadFrame
		}
		n := binary.BigEndian.Uint32(b)
		switch {
		case uint64(n) > uint64(maxLen):
			return frames, ErrFrameTooLarge
		case n < headerSize, uint64(len(b)-lenSize) < uint64(n):
			return frames, ErrBadFrame
		}
		body := b[lenSize : lenSize+int(n)]
		frames = append(frames, frame{id: binary.BigEndian.Uint64(body), code: body[8], payload: body[headerSize:]})
		b = b[lenSize+int(n):]
	}
	return frames, nil
}

// frameKey identifies a frame for multiset comparisons.
func frameKey(id uint64, code uint8, payload []byte) string {
	return fmt.Sprintf("%d/%d/%x", id, code, payload)
}

// inboundSeeds are FuzzInboundConn's seeds: what a connection to a
// transport may carry, built from real encodings.
func inboundSeeds() map[string][]byte {
	rpc := func(frames ...[]byte) []byte { return append([]byte{streamRPC}, bytes.Join(frames, nil)...) }
	req := frameBytes(1, mEcho, []byte("hello"))
	return map[string][]byte{
		"valid-one-request":        rpc(req),
		"valid-pipelined":          rpc(req, frameBytes(2, 7, nil), frameBytes(3, mRemoteErr, []byte("boom")), frameBytes(2, 7, nil)),
		"valid-remote-error":       rpc(frameBytes(9, mRemoteErr, []byte("handler failed"))),
		"valid-max-frame":          rpc(frameBytes(1<<63, 0, bytes.Repeat([]byte{0xa5}, fuzzMaxFrame-headerSize))),
		"valid-stream-byte-only":   {streamRPC},
		"valid-raft":               append([]byte{streamRaft}, "raft bytes are raft's business"...),
		"valid-raft-empty":         {streamRaft},
		"valid-empty":              {},
		"invalid-stream-byte":      append([]byte{0x7f}, req...),
		"invalid-tls-record":       {0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x03},
		"invalid-oversize":         rpc(req, binary.BigEndian.AppendUint32(nil, fuzzMaxFrame+1)),
		"invalid-max-uint32":       rpc(binary.BigEndian.AppendUint32(nil, 0xffffffff)),
		"invalid-undersize":        rpc(req, binary.BigEndian.AppendUint32(nil, headerSize-1), []byte("12345678")),
		"invalid-truncated-prefix": rpc(req, []byte{0, 0}),
		"invalid-truncated-frame":  rpc(req, frameBytes(2, mEcho, []byte("cut short"))[:12]),
	}
}

// FuzzInboundConn feeds arbitrary bytes to a Transport as one inbound
// connection's whole stream and checks the outcome against the format: a
// raft stream reaches StreamLayer.Accept with every byte after the stream
// byte intact; an unknown stream byte is counted and closed; an RPC stream
// gets exactly one well-formed response per complete request (the
// handler's answer, under the request's id), and a stream that then breaks
// the framing rules is closed and counted in RejectedFrame, having been
// answered for at most the requests before the violation. Nothing panics.
func FuzzInboundConn(f *testing.F) {
	for _, b := range inboundSeeds() {
		f.Add(b)
	}
	srv := newTransport(f, Config{MaxFrameSize: fuzzMaxFrame, HandshakeTimeout: time.Second, MaxConns: 4096, MaxConnsPerPeer: 4096, Handler: fuzzHandler})
	raftConns := make(chan net.Conn)
	go func() {
		for {
			c, err := srv.StreamLayer().Accept()
			if err != nil {
				return
			}
			raftConns <- c
		}
	}()
	addr := srv.Addr().String()

	f.Fuzz(func(t *testing.T, data []byte) {
		before := srv.Stats()
		c := dialRaw(t, addr)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var frames []frame
		var tail error
		rpc := len(data) > 0 && data[0] == streamRPC
		if rpc {
			frames, tail = wireFrames(data[1:], fuzzMaxFrame)
		}
		// A clean RPC stream stays open, as a real client's does, so that
		// every request is answered; everything else ends with a FIN.
		halfClose := !rpc || tail != nil
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_, _ = c.Write(data) // the server may close before reading it all
			if halfClose {
				_ = c.CloseWrite()
			}
		}()
		defer func() { c.Close(); <-wrote }()

		switch {
		case len(data) == 0:
			expectClosedByPeer(t, c)
			return
		case data[0] == streamRaft:
			var rc net.Conn
			select {
			case rc = <-raftConns:
			case <-time.After(10 * time.Second):
				t.Fatal("raft stream never reached Accept")
			}
			defer rc.Close()
			_ = rc.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatalf("reading the raft stream: %v", err)
			}
			if !bytes.Equal(got, data[1:]) {
				t.Fatalf("raft stream carried %x, want %x", got, data[1:])
			}
			return
		case data[0] != streamRPC:
			// Counted in RejectedStream, or as a refused TLS handshake
			// when the byte is a TLS record's (0x16).
			expectClosedByPeer(t, c)
			waitFor(t, "the refusal to be counted", func() bool { return srv.Stats().Rejected == before.Rejected+1 })
			return
		}

		want := map[string]int{}
		for _, fr := range frames {
			status := statusOK
			if fr.code == mRemoteErr {
				status = statusError
			}
			want[frameKey(fr.id, status, fr.payload)]++
		}
		br := bufio.NewReader(c)
		for got := 0; tail != nil || got < len(frames); got++ {
			resp, err := readFrame(br, DefaultMaxFrameSize)
			if err != nil {
				if errors.Is(err, ErrBadFrame) || errors.Is(err, ErrFrameTooLarge) || tail == nil {
					t.Fatalf("after %d of %d responses: %v", got, len(frames), err)
				}
				break // closed (or reset) by the server
			}
			k := frameKey(resp.id, resp.code, resp.payload)
			if want[k] == 0 {
				t.Fatalf("unexpected response %s to requests %x", k, data)
			}
			want[k]--
		}
		if tail != nil {
			waitFor(t, "RejectedFrame", func() bool { return srv.Stats().RejectedFrame == before.RejectedFrame+1 })
		}
		if s := srv.Stats(); s.Rejected != before.Rejected+boolToUint(tail != nil) {
			t.Fatalf("Rejected went from %d to %d; stats %+v", before.Rejected, s.Rejected, s)
		}
	})
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// responseSeeds are FuzzCallResponse's seeds: what a peer may send back on
// a fresh connection, whose first request has id 1.
func responseSeeds() map[string][]byte {
	return map[string][]byte{
		"valid-ok":                 frameBytes(1, statusOK, []byte("answer")),
		"valid-ok-empty":           frameBytes(1, statusOK, nil),
		"valid-remote-error":       frameBytes(1, statusError, []byte("no such key")),
		"valid-stale-then-ok":      append(frameBytes(7, statusOK, []byte("late")), frameBytes(1, statusOK, []byte("answer"))...),
		"valid-ok-then-garbage":    append(frameBytes(1, statusOK, []byte("answer")), 0xff, 0xff, 0xff, 0xff),
		"valid-max-frame":          frameBytes(1, statusOK, bytes.Repeat([]byte{0x5a}, fuzzMaxFrame-headerSize)),
		"invalid-nothing":          {},
		"invalid-only-stale":       frameBytes(2, statusOK, []byte("other call")),
		"invalid-unknown-status":   frameBytes(1, 2, []byte("?")),
		"invalid-oversize":         binary.BigEndian.AppendUint32(nil, fuzzMaxFrame+1),
		"invalid-undersize":        binary.BigEndian.AppendUint32(nil, 8),
		"invalid-truncated-prefix": {0, 0, 0},
		"invalid-truncated-frame":  frameBytes(1, statusOK, []byte("answer"))[:10],
		"invalid-tls-alert":        {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46},
	}
}

// FuzzCallResponse has a fake peer answer a Call with arbitrary bytes and
// checks Call's result against the format: the first frame carrying the
// call's id decides it (its payload, or a *RemoteError with its text);
// frames for other ids are skipped; a framing violation, an unknown status
// or the end of the stream before that frame fails the call with
// ErrConnLost wrapping the reason. Call returns promptly and nothing
// panics.
func FuzzCallResponse(f *testing.F) {
	for _, b := range responseSeeds() {
		f.Add(b)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ln.Close() })
	request := []byte("request")

	f.Fuzz(func(t *testing.T, data []byte) {
		// A fresh client per input: its first request on its first
		// connection has id 1.
		cli, err := New(Config{BindAddr: "127.0.0.1:0", MaxFrameSize: fuzzMaxFrame, Handler: fuzzHandler})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		peerErr := make(chan error, 1)
		go func() {
			peerErr <- func() error {
				c, err := ln.Accept()
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if b, err := br.ReadByte(); err != nil || b != streamRPC {
					return fmt.Errorf("stream byte %#x, %v", b, err)
				}
				req, err := readFrame(br, fuzzMaxFrame)
				if err != nil {
					return err
				}
				if req.id != 1 || req.code != mEcho || !bytes.Equal(req.payload, request) {
					return fmt.Errorf("request %+v, want id 1 method %d payload %q", req, mEcho, request)
				}
				_, _ = c.Write(data) // the client may close on a violation
				return nil
			}()
		}()

		// What the format says the call gets.
		var (
			want    []byte
			wantErr error // nil, ErrRemote, or the cause under ErrConnLost
		)
		frames, tail := wireFrames(data, fuzzMaxFrame)
		decided := false
		for _, fr := range frames {
			if fr.code != statusOK && fr.code != statusError {
				wantErr, decided = ErrBadFrame, true
				break
			}
			if fr.id == 1 {
				want, decided = fr.payload, true
				if fr.code == statusError {
					wantErr = ErrRemote
				}
				break
			}
		}
		if !decided {
			wantErr = tail
			if wantErr == nil {
				wantErr = io.EOF
			}
		}
		// A first answer that starts like a TLS alert record (0x15 0x03)
		// is a TLS node refusing plaintext: the call fails on the
		// connection, whatever frames the bytes would make.
		tlsAlert := len(data) >= 2 && data[0] == 0x15 && data[1] == 0x03
		if tlsAlert {
			want, wantErr = nil, ErrConnLost
		}

		start := time.Now()
		got, err := cli.Call(ctxTimeout(t, 10*time.Second), ln.Addr().String(), mEcho, request)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Call took %v", took)
		}
		if perr := <-peerErr; perr != nil {
			t.Fatalf("fake peer: %v", perr)
		}
		switch {
		case wantErr == nil:
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Call = %q, %v; want %q", got, err, want)
			}
		case wantErr == ErrRemote:
			var re *RemoteError
			if !errors.As(err, &re) || re.Message != string(want) {
				t.Fatalf("Call error %v, want RemoteError %q", err, want)
			}
		default:
			if !errors.Is(err, ErrConnLost) || !errors.Is(err, wantErr) {
				t.Fatalf("Call = %q, %v; want ErrConnLost wrapping %v", got, err, wantErr)
			}
		}
	})
}

// allocSeeds are FuzzFrameAlloc's seeds: streams that declare more than
// they carry, or more than the limit.
func allocSeeds() map[string][]byte {
	return map[string][]byte{
		"valid-two-frames":          append(frameBytes(1, 1, []byte("a")), frameBytes(2, 2, bytes.Repeat([]byte("b"), 300))...),
		"invalid-max-uint32":        {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 1},
		"invalid-just-over-limit":   binary.BigEndian.AppendUint32(nil, allocMaxLen+1),
		"invalid-at-limit-no-body":  binary.BigEndian.AppendUint32(nil, allocMaxLen),
		"invalid-declares-16k-of-9": append(binary.BigEndian.AppendUint32(nil, 16<<10), frameBytes(1, 1, nil)[lenSize:]...),
	}
}

// allocMaxLen is FuzzFrameAlloc's frame limit.
const allocMaxLen = 64 << 10

// allocSlack is what one readFrame may allocate besides the declared
// length: the rounding of a large buffer up to whole 8 KiB pages, and an
// error value with its message.
const allocSlack = 8<<10 + 4<<10

// FuzzFrameAlloc checks that reading frames allocates no more than the
// lengths the stream declares, and never more than the limit per frame,
// whatever the length prefix says (a 4-byte prefix of 0xffffffff must not
// allocate 4 GiB). Note that a frame's buffer is allocated at its declared
// length before its bytes arrive, so a stream may make the reader allocate
// up to the limit for a few bytes sent; this target pins that bound.
func FuzzFrameAlloc(f *testing.F) {
	for _, b := range allocSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 16)
		rest := data
		var ms runtime.MemStats
		for {
			var declared uint64
			if len(rest) >= lenSize {
				declared = min(uint64(binary.BigEndian.Uint32(rest)), allocMaxLen)
			}
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			fr, err := readFrame(br, allocMaxLen)
			runtime.ReadMemStats(&ms)
			if got := ms.TotalAlloc - before; got > declared+allocSlack {
				t.Fatalf("readFrame allocated %d bytes for a frame declaring %d (limit %d)", got, declared, allocMaxLen)
			}
			if err != nil {
				return
			}
			rest = rest[frameSize(len(fr.payload)):]
		}
	})
}

// TestFuzzCorpus checks that the seed corpora of this file's fuzz targets,
// checked in under testdata/fuzz, match what the seed functions generate
// and that each seed is valid or invalid as its name says; run with
// -update-corpus to rewrite them. (FuzzFrameDecode's corpus is hand-made.)
func TestFuzzCorpus(t *testing.T) {
	for target, seeds := range map[string]map[string][]byte{
		"FuzzInboundConn":  inboundSeeds(),
		"FuzzCallResponse": responseSeeds(),
		"FuzzFrameAlloc":   allocSeeds(),
	} {
		for name, b := range seeds {
			var valid bool
			switch target {
			case "FuzzInboundConn":
				_, tail := wireFrames(b[min(len(b), 1):], fuzzMaxFrame)
				valid = len(b) == 0 || b[0] == streamRaft || (b[0] == streamRPC && tail == nil)
			case "FuzzCallResponse":
				frames, _ := wireFrames(b, fuzzMaxFrame)
				valid = len(frames) > 0 && slicesContainsID(frames, 1)
			default:
				_, tail := wireFrames(b, allocMaxLen)
				valid = tail == nil
			}
			if valid != strings.HasPrefix(name, "valid-") {
				t.Errorf("%s seed %s: valid = %v", target, name, valid)
			}
			fuzzcorpus.Check(t, target, name, b)
		}
	}
}

// slicesContainsID reports whether a frame with a known status carries id
// before any frame with an unknown one.
func slicesContainsID(frames []frame, id uint64) bool {
	for _, fr := range frames {
		if fr.code != statusOK && fr.code != statusError {
			return false
		}
		if fr.id == id {
			return true
		}
	}
	return false
}
