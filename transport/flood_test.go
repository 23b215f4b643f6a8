package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loopbackAlias returns a local TCP address on ip (an address of the 127/8
// loopback network on Linux), or skips the test where it cannot be bound.
func loopbackAlias(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot bind %s (loopback aliases are Linux-only): %v", ip, err)
	}
	ln.Close()
	return ip + ":0"
}

// floodKind is what one flooding connection does once connected.
type floodKind int

const (
	floodSilent   floodKind = iota // sends nothing: a slow loris
	floodGarbage                   // random bytes, then waits to be closed
	floodOversize                  // an RPC stream whose first frame declares 4 GiB
)

// floodResult is one flooding connection's fate.
type floodResult struct {
	kind     floodKind
	lifetime time.Duration // from connect until the server closed it
	survived bool          // still open when the flooder gave up on it
}

// TestFlood_PerPeerLimit floods a transport from one IP (127.0.0.2) with 200
// concurrent connections that send nothing, garbage or an oversize frame,
// each redialling as soon as it is closed, while a peer on another IP
// (127.0.0.3) keeps calling: its calls, on its pooled connection and on
// fresh ones, keep succeeding; the flood is held to MaxConnsPerPeer and
// counted in RejectedPeer; silent connections are closed at
// HandshakeTimeout.
func TestFlood_PerPeerLimit(t *testing.T) {
	const (
		perPeer   = 8
		maxConns  = 64
		flooders  = 200
		handshake = 300 * time.Millisecond
		floodFor  = 3 * time.Second
		window    = 100 * time.Millisecond
		// redial is how long a flooder waits before reconnecting. The
		// flooder runs in this process on the same two cores; without a
		// pause its connection churn would starve the server of CPU, which
		// a remote flooder cannot do.
		redial = 50 * time.Millisecond
	)
	flooderAddr := loopbackAlias(t, "127.0.0.2")
	peerAddr := loopbackAlias(t, "127.0.0.3")
	echo := func(_ context.Context, _ uint8, req []byte) ([]byte, error) { return req, nil }
	srv := newTransport(t, Config{BindAddr: "127.0.0.1:0", Handler: echo,
		MaxConnsPerPeer: perPeer, MaxConns: maxConns, HandshakeTimeout: handshake})
	addr := srv.Addr().String()
	peer := newTransport(t, Config{BindAddr: peerAddr, Handler: echo})
	mustCall(t, peer, addr, "before the flood")

	laddr, err := net.ResolveTCPAddr("tcp", flooderAddr)
	if err != nil {
		t.Fatal(err)
	}
	dialer := &net.Dialer{LocalAddr: laddr, Timeout: 2 * time.Second}

	start := time.Now()
	end := start.Add(floodFor)
	var (
		mu      sync.Mutex
		results []floodResult
		dials   atomic.Int64
		wg      sync.WaitGroup
	)
	for i := range flooders {
		kind := floodKind(i % 4)
		if kind > floodOversize {
			kind = floodSilent // half the flooders are silent
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			for n := 0; n < 100 && time.Now().Before(end); n++ {
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				dials.Add(1)
				connected := time.Now()
				switch kind {
				case floodGarbage:
					junk := make([]byte, 1+rng.IntN(512))
					for j := range junk {
						junk[j] = byte(rng.Uint32())
					}
					if junk[0] == streamRPC {
						junk[0] = 0x7f // an RPC stream of junk may idle for minutes: see floodOversize
					}
					_, _ = c.Write(junk)
				case floodOversize:
					_, _ = c.Write(binary.BigEndian.AppendUint32([]byte{streamRPC}, 0xffffffff))
				}
				_ = c.SetReadDeadline(time.Now().Add(handshake + 2*time.Second))
				_, err = io.Copy(io.Discard, c)
				r := floodResult{kind: kind, lifetime: time.Since(connected), survived: errors.Is(err, os.ErrDeadlineExceeded)}
				c.Close()
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				time.Sleep(redial)
			}
		})
	}

	// The legitimate peer: back-to-back calls on its pooled connection, and
	// every 200 ms a call from a fresh transport (a new connection) on the
	// same IP.
	var (
		successes []time.Duration // since start
		failures  []error
	)
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, err)
			return
		}
		successes = append(successes, time.Since(start))
	}
	var legit sync.WaitGroup
	legit.Go(func() {
		for i := 0; time.Now().Before(end); i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			msg := fmt.Appendf(nil, "pooled %d", i)
			resp, err := peer.Call(ctx, addr, mEcho, msg)
			cancel()
			if err == nil && string(resp) != string(msg) {
				err = fmt.Errorf("echo %q = %q", msg, resp)
			}
			record(err)
			time.Sleep(time.Millisecond)
		}
	})
	var fresh atomic.Int64
	legit.Go(func() {
		for time.Now().Before(end) {
			err := func() error {
				tr, err := New(Config{BindAddr: peerAddr, Handler: echo})
				if err != nil {
					return err
				}
				defer tr.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err = tr.Call(ctx, addr, mEcho, []byte("fresh"))
				return err
			}()
			if err == nil {
				fresh.Add(1)
			}
			record(err)
			time.Sleep(200 * time.Millisecond)
		}
	})
	legit.Wait()
	wg.Wait()

	st := srv.Stats()
	// Successes per window of the flood, and the longest stretch without one.
	counts := make([]int, int(floodFor/window))
	var longestGap, prev time.Duration
	for _, s := range successes {
		if i := int(s / window); i < len(counts) {
			counts[i]++
		}
		longestGap = max(longestGap, s-prev)
		prev = s
	}
	longestGap = max(longestGap, floodFor-prev)
	sorted := slices.Sorted(slices.Values(counts))
	var byKind [3]struct{ n, timedOut, rejectedAtOnce, survived int }
	var silentMax time.Duration
	for _, r := range results {
		k := &byKind[r.kind]
		k.n++
		switch {
		case r.survived:
			k.survived++
		case r.lifetime < handshake/2:
			k.rejectedAtOnce++
		default:
			k.timedOut++
		}
		if r.kind == floodSilent && !r.survived && r.lifetime >= handshake/2 {
			silentMax = max(silentMax, r.lifetime)
		}
	}
	t.Logf("flood: %d flooders from %s, %d connections in %v; legit calls: %d ok (%d on fresh connections), %d failed",
		flooders, flooderAddr, dials.Load(), floodFor, len(successes), fresh.Load(), len(failures))
	t.Logf("legit successes per %v window: min %d, median %d, max %d; longest gap %v",
		window, sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1], longestGap.Round(time.Millisecond))
	for kind, name := range []string{"silent", "garbage", "oversize"} {
		k := byKind[kind]
		t.Logf("%-8s connections: %d, closed at once %d, closed later %d, still open %d", name, k.n, k.rejectedAtOnce, k.timedOut, k.survived)
	}
	t.Logf("silent connections admitted were closed after at most %v (HandshakeTimeout %v)", silentMax.Round(time.Millisecond), handshake)
	t.Logf("server stats: %+v", st)

	for _, err := range failures {
		t.Errorf("legitimate call failed during the flood: %v", err)
	}
	if longestGap > time.Second {
		t.Errorf("legitimate calls went %v without a success", longestGap)
	}
	if fresh.Load() == 0 {
		t.Error("no call on a fresh connection succeeded during the flood")
	}
	if st.RejectedPeer == 0 {
		t.Error("RejectedPeer = 0: the flood was never held to MaxConnsPerPeer")
	}
	if st.RejectedConns != 0 {
		t.Errorf("RejectedConns = %d: the flood from one IP reached MaxConns", st.RejectedConns)
	}
	if st.RejectedHandshake == 0 || byKind[floodSilent].timedOut == 0 {
		t.Errorf("no silent connection was closed by the handshake timeout (RejectedHandshake %d)", st.RejectedHandshake)
	}
	if silentMax > handshake+time.Second {
		t.Errorf("a silent connection lived %v, HandshakeTimeout is %v", silentMax, handshake)
	}
	if st.RejectedFrame == 0 {
		t.Error("RejectedFrame = 0: no oversize frame was refused")
	}
	for kind, name := range []string{"silent", "garbage", "oversize"} {
		if n := byKind[kind].survived; n > 0 {
			t.Errorf("%d %s connections were still open %v after they connected", n, name, handshake+2*time.Second)
		}
	}

	// Once the flood stops every flooding connection is released, and the
	// flooder's IP is served again like any other.
	waitFor(t, "flood connections to be released", func() bool { return srv.Stats().ConnsIn <= 1 })
	flooder := newTransport(t, Config{BindAddr: flooderAddr, Handler: echo})
	mustCall(t, flooder, addr, "after the flood")
}

// A connection that sends its stream byte and then nothing, or starts a
// frame and stalls, is closed: after HandshakeTimeout before its first
// frame, after the frame timeout (bounded by 2*IdleTimeout) inside one.
func TestSlowLoris_AfterTheStreamByte(t *testing.T) {
	defer func(d time.Duration) { frameTimeout = d }(frameTimeout)
	frameTimeout = 500 * time.Millisecond
	// Idle connections may stay 10s: both closes below must come sooner.
	srv, err := New(Config{
		BindAddr:         "127.0.0.1:0",
		Handler:          func(context.Context, uint8, []byte) ([]byte, error) { return nil, nil },
		HandshakeTimeout: 300 * time.Millisecond,
		IdleTimeout:      5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for name, send := range map[string][]byte{
		"stream byte only": {streamRPC},
		// A frame declaring 1 MiB, of which 3 bytes arrive.
		"stalled frame": {streamRPC, 0x00, 0x10, 0x00, 0x00, 1, 2, 3},
	} {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		took := time.Since(start)
		c.Close()
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: connection still open after %v (read: %v)", name, took, err)
			continue
		}
		if took > 2*time.Second {
			t.Errorf("%s: closed after %v, want well under the 10s idle timeout", name, took)
		}
		t.Logf("%s: closed after %v", name, took.Round(time.Millisecond))
	}
}
