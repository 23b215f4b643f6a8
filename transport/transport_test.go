package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Methods served by testHandler.
const (
	mEcho  uint8 = 1 // returns the request
	mFail  uint8 = 2 // returns an error "failed: <request>"
	mBlock uint8 = 3 // signals started (if set) then waits for release or ctx
	mBig   uint8 = 4 // returns a response of the size given in the request
)

type testServer struct {
	started chan struct{} // mBlock sends here when it starts (if non-nil)
	release chan struct{} // mBlock returns when this is closed
	prefix  string        // prepended to mEcho responses
}

func (s *testServer) handle(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	switch method {
	case mEcho:
		return append([]byte(s.prefix), req...), nil
	case mFail:
		return nil, fmt.Errorf("failed: %s", req)
	case mBlock:
		if s.started != nil {
			s.started <- struct{}{}
		}
		select {
		case <-s.release:
			return []byte("released"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case mBig:
		return make([]byte, binary.BigEndian.Uint32(req)), nil
	}
	return nil, fmt.Errorf("unknown method %d", method)
}

func newServer() *testServer {
	return &testServer{release: make(chan struct{})}
}

// newTransport starts a transport on 127.0.0.1:0 (unless cfg says
// otherwise) and closes it when the test ends.
func newTransport(t testing.TB, cfg Config) *Transport {
	t.Helper()
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	if cfg.Handler == nil {
		cfg.Handler = newServer().handle
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustCall makes an echo call and checks the answer.
func mustCall(t testing.TB, c *Transport, addr string, msg string) {
	t.Helper()
	resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte(msg))
	if err != nil {
		t.Fatalf("Call %s: %v", addr, err)
	}
	if string(resp) != msg {
		t.Fatalf("Call %s = %q, want %q", addr, resp, msg)
	}
}

func dialRaw(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// expectClosedByPeer reads c until it fails and checks the failure is the
// peer closing it (EOF or reset), not our read deadline.
func expectClosedByPeer(t testing.TB, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func frameBytes(id uint64, code uint8, payload []byte) []byte {
	return appendFrame(nil, id, code, payload)
}

func TestTransport_RoundTrip(t *testing.T) {
	srv := newTransport(t, Config{})
	cli := newTransport(t, Config{})
	addr := srv.Addr().String()

	mustCall(t, cli, addr, "hello")
	mustCall(t, cli, addr, "")
	// And the other way: every transport is both client and server.
	mustCall(t, srv, cli.Addr().String(), "back")

	s := cli.Stats()
	if s.CallsOut != 2 || s.CallErrors != 0 || s.ConnsOut != 1 || s.Dials != 1 {
		t.Errorf("client stats = %+v, want 2 calls, 0 errors, 1 conn, 1 dial", s)
	}
	if got := srv.Stats().CallsIn; got != 2 {
		t.Errorf("server CallsIn = %d, want 2", got)
	}
}

func TestTransport_ConcurrentCallers(t *testing.T) {
	srv := newTransport(t, Config{})
	cli := newTransport(t, Config{})
	addr := srv.Addr().String()
	const goroutines, calls = 64, 200

	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				req := fmt.Appendf(nil, "g%d-i%d", g, i)
				method := mEcho
				if i%10 == 0 {
					method = mFail
				}
				resp, err := cli.Call(ctx, addr, method, req)
				if method == mFail {
					var re *RemoteError
					if !errors.As(err, &re) || re.Message != "failed: "+string(req) {
						errs <- fmt.Errorf("call %s: err = %v, want RemoteError for it", req, err)
						return
					}
					continue
				}
				if err != nil || !bytes.Equal(resp, req) {
					errs <- fmt.Errorf("call %s = %q, %v", req, resp, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := cli.Stats()
	if s.CallsOut != goroutines*calls {
		t.Errorf("CallsOut = %d, want %d", s.CallsOut, goroutines*calls)
	}
	if s.ConnsOut < 1 || s.ConnsOut > maxConnsPerPeer {
		t.Errorf("ConnsOut = %d, want 1..%d (pooled)", s.ConnsOut, maxConnsPerPeer)
	}
}

func TestTransport_RemoteError(t *testing.T) {
	srv := newTransport(t, Config{})
	cli := newTransport(t, Config{})

	_, err := cli.Call(ctxTimeout(t, 5*time.Second), srv.Addr().String(), mFail, []byte("boom"))
	var re *RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want *RemoteError", err, err)
	}
	if re.Message != "failed: boom" {
		t.Errorf("Message = %q, want %q", re.Message, "failed: boom")
	}
	if !errors.Is(err, ErrRemote) {
		t.Errorf("errors.Is(err, ErrRemote) = false")
	}
	if want := "transport: remote: failed: boom"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if s := srv.Stats(); s.HandlerErrors != 1 {
		t.Errorf("HandlerErrors = %d, want 1", s.HandlerErrors)
	}
}

// A transport without a handler yet (its owner still starting) answers
// every request with ErrNotServing, and serves once Serve installs one.
func TestTransport_ServeLater(t *testing.T) {
	srv, err := New(Config{BindAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli := newTransport(t, Config{})

	_, err = cli.Call(ctxTimeout(t, 5*time.Second), srv.Addr().String(), mEcho, []byte("early"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Message != ErrNotServing.Error() {
		t.Fatalf("a call before Serve: %v, want a remote %q", err, ErrNotServing)
	}
	srv.Serve(newServer().handle)
	resp, err := cli.Call(ctxTimeout(t, 5*time.Second), srv.Addr().String(), mEcho, []byte("late"))
	if err != nil || string(resp) != "late" {
		t.Fatalf("a call after Serve: %q, %v", resp, err)
	}
}

func TestTransport_HandlerPanic(t *testing.T) {
	srv := newTransport(t, Config{Handler: func(context.Context, uint8, []byte) ([]byte, error) {
		panic("oops")
	}})
	cli := newTransport(t, Config{})
	_, err := cli.Call(ctxTimeout(t, 5*time.Second), srv.Addr().String(), 9, nil)
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "panicked") {
		t.Fatalf("err = %v, want RemoteError about the panic", err)
	}
}

func TestTransport_CallContext(t *testing.T) {
	s := newServer()
	s.started = make(chan struct{}, 1)
	srv := newTransport(t, Config{Handler: s.handle})
	cli := newTransport(t, Config{})
	addr := srv.Addr().String()

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := cli.Call(ctx, addr, mBlock, nil)
			done <- err
		}()
		<-s.started // the request is in the handler
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Call returned %v after cancel", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Call did not return after cancel")
		}
	})

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := cli.Call(ctx, addr, mBlock, nil)
		<-s.started
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("already done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := cli.Call(ctx, addr, mEcho, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})

	// Release the two abandoned handlers: their late responses arrive on the
	// shared connection and must be dropped without disturbing later calls.
	close(s.release)
	waitFor(t, "abandoned handlers to finish", func() bool {
		st := srv.Stats()
		return st.CallsIn == 2 && cli.Stats().ConnsOut == 1
	})
	for i := range 20 {
		mustCall(t, cli, addr, fmt.Sprint("after-", i))
	}
	if got := cli.Stats().Dials; got != 1 {
		t.Errorf("Dials = %d, want 1 (cancellation must not break the connection)", got)
	}
}

func TestTransport_FrameLimits(t *testing.T) {
	srv := newTransport(t, Config{MaxFrameSize: 4096})
	cli := newTransport(t, Config{MaxFrameSize: 4096})
	addr := srv.Addr().String()
	ctx := ctxTimeout(t, 5*time.Second)

	// A request that cannot fit is refused locally.
	if _, err := cli.Call(ctx, addr, mEcho, make([]byte, 4096-headerSize+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize request: err = %v, want ErrFrameTooLarge", err)
	}
	// One that exactly fits goes through.
	req := bytes.Repeat([]byte("x"), 4096-headerSize)
	if resp, err := cli.Call(ctx, addr, mEcho, req); err != nil || !bytes.Equal(resp, req) {
		t.Fatalf("max-size request: %d bytes, %v", len(resp), err)
	}
	// A response that cannot fit becomes a remote error.
	_, err := cli.Call(ctx, addr, mBig, binary.BigEndian.AppendUint32(nil, 5000))
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "exceeds MaxFrameSize") {
		t.Fatalf("oversize response: err = %v, want RemoteError", err)
	}
	mustCall(t, cli, addr, "still fine")
}

func TestTransport_BrokenConnFailsPending(t *testing.T) {
	// A fake peer that reads requests and, once it has the fourth, closes
	// every connection without answering.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var (
		mu    sync.Mutex
		conns []net.Conn
		reqs  int
	)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				br := bufio.NewReader(c)
				if b, err := br.ReadByte(); err != nil || b != streamRPC {
					return
				}
				for {
					if _, err := readFrame(br, DefaultMaxFrameSize); err != nil {
						return
					}
					mu.Lock()
					if reqs++; reqs == 4 {
						closeAll()
					}
					mu.Unlock()
				}
			}()
		}
	}()
	defer func() { mu.Lock(); closeAll(); mu.Unlock() }()

	cli := newTransport(t, Config{})
	ctx := ctxTimeout(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = cli.Call(ctx, ln.Addr().String(), mEcho, []byte("x")) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrConnLost) {
			t.Errorf("call %d: err = %v, want ErrConnLost", i, err)
		}
	}
	waitFor(t, "broken connection to leave the pool", func() bool { return cli.Stats().ConnsOut == 0 })
}

func TestTransport_WriteStall(t *testing.T) {
	// A peer that accepts and never reads: once the socket buffers fill,
	// writes block, and each Call must still end at its deadline.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()

	cli := newTransport(t, Config{})
	req := make([]byte, DefaultMaxFrameSize-headerSize)
	// 32 MiB in flight is far more than loopback socket buffers hold, so
	// most of these calls block writing or waiting for the write lock.
	const callers = 32
	const deadline = 300 * time.Millisecond
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			_, err := cli.Call(ctx, ln.Addr().String(), mEcho, req)
			if took := time.Since(start); took > deadline+time.Second {
				errs <- fmt.Errorf("call %d took %v past its %v deadline", i, took, deadline)
			}
			// A call whose connection another call's deadline cut in
			// half fails with ErrConnLost; every other one times out.
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrConnLost) {
				errs <- fmt.Errorf("call %d: err = %v, want context.DeadlineExceeded", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestTransport_RaftStream(t *testing.T) {
	ta := newTransport(t, Config{})
	tb := newTransport(t, Config{})

	na := raft.NewNetworkTransport(ta.StreamLayer(), 2, 5*time.Second, io.Discard)
	nb := raft.NewNetworkTransport(tb.StreamLayer(), 2, 5*time.Second, io.Discard)
	defer na.Close()
	defer nb.Close()
	if got, want := string(nb.LocalAddr()), tb.Addr().String(); got != want {
		t.Fatalf("raft LocalAddr = %q, want the transport's %q", got, want)
	}

	// B answers raft RPCs.
	stop := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			select {
			case rpc := <-nb.Consumer():
				switch req := rpc.Command.(type) {
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
				case *raft.AppendEntriesRequest:
					rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil)
				default:
					rpc.Respond(nil, fmt.Errorf("unexpected %T", req))
				}
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-served }()

	target := raft.ServerAddress(tb.Addr().String())
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a"), Addr: []byte(ta.Addr().String())}

	var vote raft.RequestVoteResponse
	if err := na.RequestVote("b", target, &raft.RequestVoteRequest{RPCHeader: header, Term: 7, LastLogIndex: 3, LastLogTerm: 6}, &vote); err != nil {
		t.Fatalf("RequestVote: %v", err)
	}
	if !vote.Granted || vote.Term != 7 {
		t.Fatalf("vote = %+v, want granted in term 7", vote)
	}

	var app raft.AppendEntriesResponse
	entries := []*raft.Log{{Index: 4, Term: 7, Type: raft.LogCommand, Data: []byte("cmd")}}
	if err := na.AppendEntries("b", target, &raft.AppendEntriesRequest{RPCHeader: header, Term: 7, PrevLogEntry: 3, PrevLogTerm: 6, Entries: entries, LeaderCommitIndex: 3}, &app); err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
	if !app.Success || app.LastLog != 4 {
		t.Fatalf("append = %+v, want success up to 4", app)
	}

	// RPC shares the very same port.
	mustCall(t, ta, tb.Addr().String(), "beside raft")
	if s := tb.Stats(); s.Accepted < 2 || s.Rejected != 0 {
		t.Errorf("B stats = %+v, want >= 2 accepted (raft + RPC), none rejected", s)
	}

	// Closing raft's transport closes the stream layer; RPC carries on.
	if err := nb.Close(); err != nil {
		t.Fatal(err)
	}
	mustCall(t, ta, tb.Addr().String(), "after raft closed")
	if _, err := tb.StreamLayer().Accept(); !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after StreamLayer Close: err = %v, want ErrClosed and net.ErrClosed", err)
	}
}

func TestTransport_HostileInput(t *testing.T) {
	srv := newTransport(t, Config{MaxFrameSize: 4096, HandshakeTimeout: 200 * time.Millisecond})
	cli := newTransport(t, Config{})
	addr := srv.Addr().String()

	random := func(seed uint64, prefix ...byte) []byte {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		b := append([]byte(nil), prefix...)
		for range 16 + r.IntN(1024) {
			b = append(b, byte(r.Uint32()))
		}
		return b
	}
	oversize := binary.BigEndian.AppendUint32([]byte{streamRPC}, 4097)
	// A valid request followed by a frame that ends early.
	truncated := append([]byte{streamRPC}, frameBytes(1, mEcho, []byte("ok"))...)
	truncated = append(truncated, frameBytes(2, mEcho, []byte("cut short"))[:10]...)

	tests := []struct {
		name  string
		input []byte // nil: send nothing and wait for the handshake timeout
		field func(Stats) uint64
	}{
		{"bad stream byte", []byte{0x7f, 1, 2, 3}, func(s Stats) uint64 { return s.RejectedStream }},
		{"zero stream byte", []byte{0x00}, func(s Stats) uint64 { return s.RejectedStream }},
		{"oversize length", oversize, func(s Stats) uint64 { return s.RejectedFrame }},
		{"max uint32 length", binary.BigEndian.AppendUint32([]byte{streamRPC}, 0xffffffff), func(s Stats) uint64 { return s.RejectedFrame }},
		{"undersize length", binary.BigEndian.AppendUint32([]byte{streamRPC}, 8), func(s Stats) uint64 { return s.RejectedFrame }},
		{"truncated length", []byte{streamRPC, 0, 0}, func(s Stats) uint64 { return s.RejectedFrame }},
		{"truncated frame", truncated, func(s Stats) uint64 { return s.RejectedFrame }},
		{"silent (handshake timeout)", nil, func(s Stats) uint64 { return s.RejectedHandshake }},
		{"raft stream nobody accepts", []byte{streamRaft, 1, 2}, func(s Stats) uint64 { return s.RejectedStream }},
	}
	for seed := range uint64(6) {
		tests = append(tests, struct {
			name  string
			input []byte
			field func(Stats) uint64
		}{fmt.Sprint("random seed ", seed), random(seed), func(s Stats) uint64 { return s.Rejected }})
		tests = append(tests, struct {
			name  string
			input []byte
			field func(Stats) uint64
		}{fmt.Sprint("random RPC seed ", seed), random(seed, streamRPC), func(s Stats) uint64 { return s.RejectedFrame }})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.Stats()
			c := dialRaw(t, addr)
			if tt.input != nil {
				_, _ = c.Write(tt.input) // the server may close before all is written
				_ = c.CloseWrite()
			}
			expectClosedByPeer(t, c)
			waitFor(t, "the rejection to be counted", func() bool {
				return tt.field(srv.Stats()) == tt.field(before)+1
			})
			if got := srv.Stats().Rejected; got != before.Rejected+1 {
				t.Errorf("Rejected = %d, want %d", got, before.Rejected+1)
			}
			mustCall(t, cli, addr, "still serving")
		})
	}
	waitFor(t, "hostile connections to be released", func() bool { return srv.Stats().ConnsIn == 1 })
}

func TestTransport_MaxConns(t *testing.T) {
	const maxConns = 4
	srv := newTransport(t, Config{MaxConns: maxConns})
	addr := srv.Addr().String()

	// Fill every slot with idle RPC connections.
	idle := make([]*net.TCPConn, maxConns)
	for i := range idle {
		idle[i] = dialRaw(t, addr)
		if _, err := idle[i].Write([]byte{streamRPC}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all slots taken", func() bool { return srv.Stats().ConnsIn == maxConns })

	// Further connections are closed at once.
	for range 3 {
		expectClosedByPeer(t, dialRaw(t, addr))
	}
	waitFor(t, "3 rejections", func() bool { return srv.Stats().RejectedConns == 3 })

	// So is a real client's, while the slots stay taken.
	cli := newTransport(t, Config{})
	if _, err := cli.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("x")); err == nil {
		t.Fatal("Call succeeded with every connection slot taken")
	}
	if got := srv.Stats().ConnsIn; got != maxConns {
		t.Fatalf("ConnsIn = %d, want %d", got, maxConns)
	}

	// Once the idle connections go, a fresh client is served.
	for _, c := range idle {
		c.Close()
	}
	waitFor(t, "slots to be released", func() bool { return srv.Stats().ConnsIn == 0 })
	mustCall(t, newTransport(t, Config{}), addr, "served again")
	mustCall(t, cli, addr, "and the first client too")
}

func TestTransport_PeerRestart(t *testing.T) {
	a := newServer()
	a.prefix = "A:"
	srvA, err := New(Config{BindAddr: "127.0.0.1:0", Handler: a.handle})
	if err != nil {
		t.Fatal(err)
	}
	addr := srvA.Addr().String()
	cli := newTransport(t, Config{})
	if resp, err := cli.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("1")); err != nil || string(resp) != "A:1" {
		t.Fatalf("Call to A = %q, %v", resp, err)
	}

	if err := srvA.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "client to notice the peer went away", func() bool { return cli.Stats().ConnsOut == 0 })
	if _, err := cli.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("2")); err == nil {
		t.Fatal("Call succeeded with no server")
	}

	b := newServer()
	b.prefix = "B:"
	newTransport(t, Config{BindAddr: addr, Handler: b.handle})
	if resp, err := cli.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("3")); err != nil || string(resp) != "B:3" {
		t.Fatalf("Call to restarted peer = %q, %v", resp, err)
	}
}

func TestTransport_IdleTimeout(t *testing.T) {
	srv := newTransport(t, Config{})
	cli := newTransport(t, Config{IdleTimeout: 100 * time.Millisecond})
	addr := srv.Addr().String()
	mustCall(t, cli, addr, "x")
	waitFor(t, "idle pooled connection to close", func() bool { return cli.Stats().ConnsOut == 0 })
	waitFor(t, "server to see it go", func() bool { return srv.Stats().ConnsIn == 0 })
	mustCall(t, cli, addr, "y")
	if got := cli.Stats().Dials; got != 2 {
		t.Errorf("Dials = %d, want 2", got)
	}
}

func TestTransport_CloseNoLeaks(t *testing.T) {
	base := runtime.NumGoroutine()

	s := newServer()
	s.started = make(chan struct{}, 1)
	srv, err := New(Config{BindAddr: "127.0.0.1:0", Handler: s.handle})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(Config{BindAddr: "127.0.0.1:0", Handler: s.handle})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	mustCall(t, cli, addr, "warm")

	// Leave a handler running, a connection in its handshake and a raft
	// stream nobody accepts.
	blocked := make(chan error, 1)
	go func() {
		_, err := cli.Call(context.Background(), addr, mBlock, nil)
		blocked <- err
	}()
	<-s.started
	dialRaw(t, addr)
	raftConn, err := srv.StreamLayer().Dial(raft.ServerAddress(cli.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raftConn.Close()
	waitFor(t, "connections to be accepted", func() bool { return srv.Stats().ConnsIn == 2 && cli.Stats().ConnsIn == 1 })

	if err := cli.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Errorf("call in flight at Close: err = %v, want ErrClosed", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, tr := range []*Transport{srv, cli} {
		if err := tr.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if _, err := tr.Call(context.Background(), addr, mEcho, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Call after Close: err = %v, want ErrClosed", err)
		}
		if _, err := tr.StreamLayer().Accept(); !errors.Is(err, ErrClosed) {
			t.Errorf("Accept after Close: err = %v, want ErrClosed", err)
		}
		if s := tr.Stats(); s.ConnsIn != 0 || s.ConnsOut != 0 {
			t.Errorf("after Close: ConnsIn %d ConnsOut %d, want 0", s.ConnsIn, s.ConnsOut)
		}
	}
	raftConn.Close()

	waitFor(t, "goroutines to return to baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func TestNew_Validation(t *testing.T) {
	h := newServer().handle
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; nil: valid
	}{
		{"valid", Config{BindAddr: "127.0.0.1:0", Handler: h}, nil},
		{"everything wrong", Config{BindAddr: "nope", MaxFrameSize: 10, DialTimeout: -1, HandshakeTimeout: -1, IdleTimeout: -1, MaxConns: -1},
			[]string{`BindAddr "nope"`, "MaxFrameSize 10", "DialTimeout -1ns", "HandshakeTimeout -1ns", "IdleTimeout -1ns", "MaxConns -1"}},
		{"missing bind", Config{Handler: h}, []string{"BindAddr is required"}},
		{"bad port", Config{BindAddr: "127.0.0.1:99999", Handler: h}, []string{`port "99999"`}},
		{"unspecified bind needs advertise", Config{BindAddr: ":0", Handler: h}, []string{"AdvertiseAddr is required"}},
		{"unspecified advertise", Config{BindAddr: "0.0.0.0:0", AdvertiseAddr: "0.0.0.0:7400", Handler: h}, []string{"must not be unspecified"}},
		{"advertise port 0", Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "10.0.0.1:0", Handler: h}, []string{"port must not be 0"}},
		{"advertise hostname", Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "node1:7400", Handler: h}, []string{`AdvertiseAddr "node1:7400" must be IP:port`}},
		{"frame too big", Config{BindAddr: "127.0.0.1:0", Handler: h, MaxFrameSize: MaxMaxFrameSize + 1}, []string{"MaxFrameSize"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(tt.cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				tr.Close()
				return
			}
			if err == nil {
				tr.Close()
				t.Fatalf("New succeeded, want error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "transport: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestTransport_AdvertiseAddr(t *testing.T) {
	tr := newTransport(t, Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "10.1.2.3:7400"})
	if got := tr.Addr().String(); got != "10.1.2.3:7400" {
		t.Errorf("Addr = %q", got)
	}
	if got := tr.StreamLayer().Addr().String(); got != "10.1.2.3:7400" {
		t.Errorf("StreamLayer Addr = %q", got)
	}
}

func TestReadFrame(t *testing.T) {
	good := frameBytes(42, 7, []byte("payload"))
	tests := []struct {
		name    string
		in      []byte
		wantErr error // nil: good frame
	}{
		{"good", good, nil},
		{"empty payload", frameBytes(1, 0, nil), nil},
		{"clean EOF", nil, io.EOF},
		{"short prefix", []byte{0, 0}, ErrBadFrame},
		{"undersize", []byte{0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}, ErrBadFrame},
		{"oversize", []byte{0, 0, 4, 1}, ErrFrameTooLarge},
		{"huge", []byte{0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		{"truncated", good[:len(good)-1], ErrBadFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := readFrame(bufio.NewReader(bytes.NewReader(tt.in)), 1024)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := appendFrame(nil, f.id, f.code, f.payload); !bytes.Equal(got, tt.in) {
				t.Fatalf("re-encoded %x, want %x", got, tt.in)
			}
		})
	}
}

// FuzzFrameDecode feeds arbitrary bytes to the frame reader and checks every
// outcome against a direct reading of the format.
func FuzzFrameDecode(f *testing.F) {
	f.Add(frameBytes(1, 1, []byte("hello")))
	f.Add(append(frameBytes(1, 0, nil), frameBytes(2, 1, []byte("x"))...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxLen = 1024
		// A tiny buffer makes frames straddle refills.
		br := bufio.NewReaderSize(bytes.NewReader(data), 16)
		rest := data
		for {
			fr, err := readFrame(br, maxLen)
			switch {
			case len(rest) == 0:
				if err != io.EOF {
					t.Fatalf("at end: err = %v, want io.EOF", err)
				}
				return
			case len(rest) < lenSize:
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("short prefix: err = %v, want ErrBadFrame", err)
				}
				return
			}
			n := binary.BigEndian.Uint32(rest)
			switch {
			case n > maxLen:
				if !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("length %d: err = %v, want ErrFrameTooLarge", n, err)
				}
				return
			case n < headerSize, uint64(len(rest)-lenSize) < uint64(n):
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("length %d with %d bytes: err = %v, want ErrBadFrame", n, len(rest)-lenSize, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("valid frame of length %d: %v", n, err)
			}
			want := rest[:lenSize+n]
			if got := appendFrame(nil, fr.id, fr.code, fr.payload); !bytes.Equal(got, want) {
				t.Fatalf("decoded frame re-encodes to %x, want %x", got, want)
			}
			rest = rest[lenSize+n:]
		}
	})
}

func benchmarkPair(b *testing.B) (*Transport, string) {
	srv := newTransport(b, Config{})
	cli := newTransport(b, Config{})
	addr := srv.Addr().String()
	mustCall(b, cli, addr, "warm")
	return cli, addr
}

func BenchmarkCall(b *testing.B) {
	cli, addr := benchmarkPair(b)
	req := bytes.Repeat([]byte("r"), 64)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := cli.Call(ctx, addr, mEcho, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallParallel(b *testing.B) {
	cli, addr := benchmarkPair(b)
	req := bytes.Repeat([]byte("r"), 64)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cli.Call(ctx, addr, mEcho, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
