package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testCA is a throwaway cluster CA.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue signs a node certificate with the given extended key usages
// (default serverAuth and clientAuth).
func (ca *testCA) issue(t testing.TB, cn string, usages ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) config(t testing.TB, cn string) *TLSConfig {
	return &TLSConfig{CA: ca.pool, Cert: ca.issue(t, cn)}
}

// logBuffer collects a transport's logs.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func newLogBuffer() *logBuffer { return &logBuffer{} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestTLS_MutualCallAndRaft(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	srv := newTransport(t, Config{TLS: ca.config(t, "n1")})
	cli := newTransport(t, Config{TLS: ca.config(t, "n2")})
	addr := srv.Addr().String()

	mustCall(t, cli, addr, "over TLS")
	if err := cli.Probe(ctxTimeout(t, 5*time.Second), addr); err != nil {
		t.Fatalf("Probe: %v", err)
	}

	// Raft's stream crosses the same port, inside TLS.
	na := raft.NewNetworkTransport(cli.StreamLayer(), 2, 5*time.Second, io.Discard)
	nb := raft.NewNetworkTransport(srv.StreamLayer(), 2, 5*time.Second, io.Discard)
	defer na.Close()
	defer nb.Close()
	go func() {
		for rpc := range nb.Consumer() {
			if req, ok := rpc.Command.(*raft.RequestVoteRequest); ok {
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
			} else {
				rpc.Respond(nil, fmt.Errorf("unexpected %T", rpc.Command))
			}
		}
	}()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a"), Addr: []byte(cli.Addr().String())}
	var vote raft.RequestVoteResponse
	if err := na.RequestVote("b", raft.ServerAddress(addr), &raft.RequestVoteRequest{RPCHeader: header, Term: 3}, &vote); err != nil {
		t.Fatalf("RequestVote over TLS: %v", err)
	}
	if !vote.Granted || vote.Term != 3 {
		t.Fatalf("vote = %+v", vote)
	}
	if s := srv.Stats(); s.Rejected != 0 || s.Accepted < 2 {
		t.Errorf("server stats = %+v, want >= 2 accepted, none rejected", s)
	}

	// The connection really is TLS 1.3 with the client's certificate.
	raw := dialRaw(t, addr)
	tc := tls.Client(raw, cli.tlsClient)
	if err := tc.HandshakeContext(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("TLS version %#x, want TLS 1.3", v)
	}
}

func TestTLS_WrongCARefused(t *testing.T) {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "other CA")
	srvLogs := newLogBuffer()
	srv := newTransport(t, Config{TLS: ca.config(t, "n1"), Logger: srvLogs.logger()})
	addr := srv.Addr().String()

	t.Run("client certificate from another CA", func(t *testing.T) {
		// A whole cluster of the other CA: it trusts its own CA only.
		intruder := newTransport(t, Config{TLS: other.config(t, "intruder")})
		_, err := intruder.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("x"))
		if !errors.Is(err, ErrTLS) {
			t.Fatalf("Call from another CA's node: err = %v, want ErrTLS", err)
		}
		t.Logf("dialer's error: %v", err)
		// Its own check of our server certificate fails first.
		if !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
			t.Errorf("error does not say why: %v", err)
		}
		// The server sees the dialer give up (it refused our certificate).
		waitFor(t, "the server to count it", func() bool { return srv.Stats().RejectedTLS == 1 })
	})

	t.Run("client trusts our CA, certificate of another", func(t *testing.T) {
		before := srv.Stats()
		// Built by hand: New refuses a certificate its own CA did not sign.
		intruder := newTransport(t, Config{})
		intruder.tlsClient = (&TLSConfig{CA: ca.pool, Cert: other.issue(t, "intruder")}).clientTLS()
		_, err := intruder.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("x"))
		if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "the peer refused this node's certificate") ||
			!strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("err = %v, want ErrTLS saying the peer refused our certificate (unknown CA)", err)
		}
		t.Logf("dialer's error: %v", err)
		waitFor(t, "the rejection to be counted", func() bool { return srv.Stats().RejectedTLS == before.RejectedTLS+1 })
		waitFor(t, "the server to log why", func() bool {
			return strings.Contains(srvLogs.String(), "x509: certificate signed by unknown authority")
		})
	})

	t.Run("New refuses a certificate its CA did not sign", func(t *testing.T) {
		_, err := New(Config{BindAddr: "127.0.0.1:0", Handler: newServer().handle,
			TLS: &TLSConfig{CA: ca.pool, Cert: other.issue(t, "x")}})
		if err == nil || !strings.Contains(err.Error(), "TLS.Cert: not signed by the cluster CA") {
			t.Fatalf("New: err = %v", err)
		}
	})

	mustCall(t, newTransport(t, Config{TLS: ca.config(t, "n2")}), addr, "members still get in")
}

func TestTLS_ClientWithoutCertRefused(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	logs := newLogBuffer()
	srv := newTransport(t, Config{TLS: ca.config(t, "n1"), Logger: logs.logger()})
	addr := srv.Addr().String()

	raw := dialRaw(t, addr)
	tc := tls.Client(raw, &tls.Config{RootCAs: ca.pool, ServerName: "n1", InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	err := tc.Handshake()
	if err == nil {
		// TLS 1.3: the client finishes first; the refusal comes next.
		_, _ = tc.Write([]byte{streamRPC})
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("client without a certificate: err = %v, want the server's 'certificate required'", err)
	}
	waitFor(t, "the rejection to be counted", func() bool { return srv.Stats().RejectedTLS == 1 })
	// The server counts the refusal before it logs it.
	waitFor(t, "the server to log why", func() bool {
		return strings.Contains(logs.String(), "client didn't provide a certificate")
	})
}

func TestTLS_UsageChecked(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	serverOnly := &TLSConfig{CA: ca.pool, Cert: ca.issue(t, "web", x509.ExtKeyUsageServerAuth)}
	err := serverOnly.Check()
	if err == nil || !strings.Contains(err.Error(), "serverAuth and clientAuth") {
		t.Fatalf("Check of a serverAuth-only certificate: %v", err)
	}
	// A dialer holding a serverAuth-only certificate is refused by the server.
	srv := newTransport(t, Config{TLS: ca.config(t, "n1")})
	cli := newTransport(t, Config{})
	cli.tlsClient = serverOnly.clientTLS()
	if _, err := cli.Call(ctxTimeout(t, 5*time.Second), srv.Addr().String(), mEcho, nil); !errors.Is(err, ErrTLS) {
		t.Fatalf("Call with a serverAuth-only certificate: %v", err)
	}
	waitFor(t, "the rejection", func() bool { return srv.Stats().RejectedTLS == 1 })
}

func TestTLS_PlaintextToTLSRefused(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	logs := newLogBuffer()
	srv := newTransport(t, Config{TLS: ca.config(t, "n1"), Logger: logs.logger()})
	plain := newTransport(t, Config{})
	addr := srv.Addr().String()

	_, err := plain.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("x"))
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "it requires TLS, and this node has no TLS configured") {
		t.Fatalf("plaintext Call to a TLS node: err = %v", err)
	}
	t.Logf("dialer's error: %v", err)
	waitFor(t, "the rejection to be counted", func() bool { return srv.Stats().RejectedTLS == 1 })
	t.Logf("server log:\n%s", logs)
	// Not retried: the next connection would be refused too.
	time.Sleep(50 * time.Millisecond)
	want := "plaintext connection from " + plain.Addr().(*net.TCPAddr).IP.String()
	if s := logs.String(); !strings.Contains(s, want) || !strings.Contains(s, "this cluster requires TLS") {
		t.Errorf("server log lacks %q ... this cluster requires TLS:\n%s", want, s)
	}
	if s := srv.Stats(); s.Rejected != 1 {
		t.Errorf("Rejected = %d, want 1", s.Rejected)
	}
}

func TestTLS_TLSToPlaintextRefused(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	logs := newLogBuffer()
	srv := newTransport(t, Config{Logger: logs.logger()})
	cli := newTransport(t, Config{TLS: ca.config(t, "n2")})
	addr := srv.Addr().String()

	_, err := cli.Call(ctxTimeout(t, 5*time.Second), addr, mEcho, []byte("x"))
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "peer closed the connection during the TLS handshake") {
		t.Fatalf("TLS Call to a plaintext node: err = %v", err)
	}
	t.Logf("dialer's error: %v", err)
	if err := cli.Probe(ctxTimeout(t, 5*time.Second), addr); !errors.Is(err, ErrTLS) {
		t.Fatalf("Probe of a plaintext node: err = %v, want ErrTLS", err)
	}
	waitFor(t, "the rejections to be counted", func() bool { return srv.Stats().RejectedTLS == 2 })
	t.Logf("server log:\n%s", logs)
	if s := logs.String(); !strings.Contains(s, "TLS handshake from 127.0.0.1:") || !strings.Contains(s, "but this node has no TLS configured") {
		t.Errorf("server log:\n%s", s)
	}
	// The raft stream too.
	if _, err := cli.StreamLayer().Dial(raft.ServerAddress(addr), time.Second); !errors.Is(err, ErrTLS) {
		t.Errorf("raft Dial: err = %v, want ErrTLS", err)
	}
	mustCall(t, newTransport(t, Config{}), addr, "plaintext peers still get in")
}

func TestTLS_SlowHandshakeClosed(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	const timeout = 300 * time.Millisecond
	srv := newTransport(t, Config{TLS: ca.config(t, "n1"), HandshakeTimeout: timeout})
	addr := srv.Addr().String()

	for i, input := range [][]byte{
		nil,                      // nothing at all
		{tlsRecordHandshake},     // the first byte of a ClientHello, then silence
		{0x16, 0x03, 0x01, 0x00}, // a record header, then silence
	} {
		before := srv.Stats()
		c := dialRaw(t, addr)
		start := time.Now()
		if input != nil {
			if _, err := c.Write(input); err != nil {
				t.Fatal(err)
			}
		}
		expectClosedByPeer(t, c)
		if el := time.Since(start); el < timeout/2 || el > timeout+3*time.Second {
			t.Errorf("case %d: closed after %v, want about %v", i, el, timeout)
		}
		waitFor(t, "the rejection", func() bool { return srv.Stats().RejectedHandshake == before.RejectedHandshake+1 })
	}

	// A TLS client that completes the handshake but never sends its stream
	// byte is closed too.
	before := srv.Stats()
	raw := dialRaw(t, addr)
	tc := tls.Client(raw, ca.config(t, "n2").clientTLS())
	if err := tc.HandshakeContext(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	expectClosedByPeer(t, tc)
	waitFor(t, "the rejection", func() bool { return srv.Stats().RejectedHandshake == before.RejectedHandshake+1 })
	waitFor(t, "connections to be released", func() bool { return srv.Stats().ConnsIn == 0 })
	mustCall(t, newTransport(t, Config{TLS: ca.config(t, "n3")}), addr, "still serving")
}

func TestLoadTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "other CA")
	write := func(name string, blocks ...*pem.Block) string {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPEM := func(c tls.Certificate) *pem.Block {
		der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		return &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	caFile := write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	good := ca.issue(t, "n1")
	certFile := write("n1.pem", &pem.Block{Type: "CERTIFICATE", Bytes: good.Certificate[0]})
	keyFile := write("n1-key.pem", keyPEM(good))
	bad := other.issue(t, "x")
	badCert := write("x.pem", &pem.Block{Type: "CERTIFICATE", Bytes: bad.Certificate[0]})
	badKey := write("x-key.pem", keyPEM(bad))

	cfg, err := LoadTLSConfig(caFile, certFile, keyFile)
	if err != nil {
		t.Fatalf("LoadTLSConfig: %v", err)
	}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want          []string
	}{
		{"missing CA", filepath.Join(dir, "nope.pem"), certFile, keyFile, []string{"nope.pem", "no such file"}},
		{"CA file without certificates", keyFile, certFile, keyFile, []string{"n1-key.pem", "no PEM CERTIFICATE"}},
		{"key of another certificate", caFile, certFile, badKey, []string{"n1.pem", "x-key.pem", "private key does not match"}},
		{"certificate of another CA", caFile, badCert, badKey, []string{"x.pem", "ca.pem", "not signed by the cluster CA", "unknown authority"}},
	} {
		_, err := LoadTLSConfig(tc.ca, tc.cert, tc.key)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}
