package pgstore

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestConfig_Invalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the message
	}{
		{"no URL", Config{}, []string{"URL"}},
		{"schema with dash", Config{URL: "postgres://x", Schema: "rp-test"}, []string{`Schema "rp-test"`}},
		{"schema uppercase", Config{URL: "postgres://x", Schema: "Raftpace"}, []string{`Schema "Raftpace"`}},
		{"schema injection", Config{URL: "postgres://x", Schema: `x"; drop table y; --`}, []string{"Schema"}},
		{"schema too long", Config{URL: "postgres://x", Schema: strings.Repeat("a", 64)}, []string{"Schema"}},
		{"cluster with space", Config{URL: "postgres://x", Cluster: "a b"}, []string{"Cluster", "whitespace"}},
		{"negative timeout", Config{URL: "postgres://x", StatementTimeout: -time.Second}, []string{"StatementTimeout -1s"}},
		{"all at once", Config{Schema: "A", Cluster: " ", StatementTimeout: time.Microsecond}, []string{"URL", "Schema", "Cluster", "StatementTimeout"}},
		{"bad URL", Config{URL: "postgres://[::1"}, []string{"URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			wantErr(t, err, ErrInvalid)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "pgstore: ") {
				t.Errorf("error %q does not start with pgstore: ", err)
			}
		})
	}
}

func TestOpen_Idempotent(t *testing.T) {
	schema := newSchema(t)
	a := openStore(t, schema, "c1")
	must(t, a.PublishAddress(ctxT(t), "n1", "127.0.0.1:1", "127.0.0.1:2"))
	a.Close()
	b := openStore(t, schema, "c1") // tables exist: no DDL, data kept
	got, err := b.DiscoverGossip(ctxT(t), time.Minute)
	must(t, err)
	if len(got) != 1 || got[0] != "127.0.0.1:2" {
		t.Fatalf("after reopening: %v, want [127.0.0.1:2]", got)
	}
	a.Close() // idempotent
	if err := a.ForgetAddress(ctxT(t), "n1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
}

// TestOpen_Concurrent opens one fresh schema from several Stores at once:
// the advisory lock must keep CREATE ... IF NOT EXISTS from racing.
func TestOpen_Concurrent(t *testing.T) {
	for round := range 3 {
		schema := newSchema(t)
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		stores := make([]*Store, n)
		for i := range n {
			wg.Go(func() {
				stores[i], errs[i] = Open(context.Background(), Config{URL: testURL(t), Schema: schema, StatementTimeout: testTimeout})
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: Open %d: %v", round, i, errs[i])
			}
			defer stores[i].Close()
		}
		var tables int
		must(t, stores[0].pool.QueryRow(ctxT(t),
			`SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1`, schema).Scan(&tables))
		if tables != len(tableNames) {
			t.Fatalf("round %d: %d tables in %s, want %d", round, tables, schema, len(tableNames))
		}
	}
}

// closedPortURL returns a URL to a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// blackholeURL returns a URL to a loopback port that accepts connections
// and never answers.
func blackholeURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable&connect_timeout=60"
}

// TestOpen_Unreachable needs no Postgres: a closed port and a server that
// never answers both give ErrUnavailable within StatementTimeout.
func TestOpen_Unreachable(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for name, url := range map[string]string{"closed port": closedPortURL(t), "no answer": blackholeURL(t)} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			s, err := Open(context.Background(), Config{URL: url, StatementTimeout: timeout})
			took := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			wantErr(t, err, ErrUnavailable)
			if took > timeout+time.Second {
				t.Fatalf("Open took %v, StatementTimeout %v", took, timeout)
			}
			t.Logf("%v after %v", err, took)
		})
	}
}

// proxy forwards TCP to Postgres and can stall (forward nothing, answer
// nothing) or drop every connection, to show what the Store does when
// Postgres goes away after Open.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   []net.Conn
	stalled bool
	resume  chan struct{}
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &proxy{ln: ln, target: target, resume: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.drop)
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		stalled, resume := p.stalled, p.resume
		p.mu.Unlock()
		if stalled {
			<-resume // closed by drop
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
}

func (p *proxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

func (p *proxy) drop() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestStore_PostgresGoesAway opens a Store through a proxy, then stalls the
// proxy (Postgres stops answering) and then drops it (connections refused):
// every call returns ErrUnavailable within StatementTimeout.
func TestStore_PostgresGoesAway(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t)
	openStore(t, schema, "c") // create the tables directly
	u, target := upstream(t, url)
	p := newProxy(t, target)
	u.Host = p.ln.Addr().String()
	const timeout = 400 * time.Millisecond
	s, err := Open(context.Background(), Config{URL: u.String(), Schema: schema, Cluster: "c", StatementTimeout: timeout})
	must(t, err)
	defer s.Close()

	lim := fsm.Limit{Rate: 100, Burst: 1}
	calls := map[string]func(ctx context.Context) error{
		"SaveCheckpoint": func(ctx context.Context) error {
			return s.SaveCheckpoint(ctx, Checkpoint{Limits: map[string]fsm.Limit{"k": lim}})
		},
		"LoadCheckpoint": func(ctx context.Context) error { _, _, err := s.LoadCheckpoint(ctx); return err },
		"PublishAddress": func(ctx context.Context) error { return s.PublishAddress(ctx, "n1", "127.0.0.1:1", "127.0.0.1:2") },
		"DiscoverGossip": func(ctx context.Context) error { _, err := s.DiscoverGossip(ctx, time.Minute); return err },
		"ForgetAddress":  func(ctx context.Context) error { return s.ForgetAddress(ctx, "n1") },
		"JoinPool":       func(ctx context.Context) error { return s.JoinPool(ctx, "n1", 1, time.Minute) },
		"ReservePooled": func(ctx context.Context) error {
			_, err := s.ReservePooled(ctx, "n1", "k", lim, 1, time.Second)
			if errors.Is(err, ErrLimitExceeded) {
				err = nil
			}
			return err
		},
		"LeavePool": func(ctx context.Context) error { _, err := s.LeavePool(ctx, "n1"); return err },
		"Witness":   func(ctx context.Context) error { _, err := s.Witness(ctx, "n1"); return err },
		"Fence": func(ctx context.Context) error {
			_, err := s.Fence(ctx, "n2", time.Second, time.Second)
			return err
		},
		"Unfence": func(ctx context.Context) error { return s.Unfence(ctx, "n2") },
	}
	order := []string{"SaveCheckpoint", "LoadCheckpoint", "PublishAddress", "DiscoverGossip", "JoinPool", "ReservePooled", "LeavePool",
		"ForgetAddress", "Witness", "Fence", "Unfence"}
	for _, name := range order {
		if err := calls[name](context.Background()); err != nil {
			t.Fatalf("%s through the proxy: %v", name, err)
		}
	}
	for _, phase := range []string{"stalled", "dropped"} {
		if phase == "stalled" {
			p.stall()
		} else {
			p.drop()
		}
		for _, name := range order {
			start := time.Now()
			err := calls[name](context.Background())
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s, Postgres %s: %v, want ErrUnavailable", phase, name, err)
			}
			if took > timeout+time.Second {
				t.Errorf("%s, Postgres %s: took %v, StatementTimeout %v", phase, name, took, timeout)
			}
		}
	}
	// The caller's own cancellation is not reported as Postgres being down.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = s.PublishAddress(ctx, "n1", "127.0.0.1:1", "127.0.0.1:2")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled context: %v, want context.Canceled and not ErrUnavailable", err)
	}
}

// upstream returns the host:port of a postgres:// URL.
func upstream(t *testing.T, raw string) (*url.URL, string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Hostname() == "" {
		t.Skip("RAFTPACE_TEST_POSTGRES is not a postgres:// URL with a TCP host; the proxy test needs one")
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return u, net.JoinHostPort(u.Hostname(), port)
}
