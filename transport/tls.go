package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// TLSConfig turns on mutual TLS 1.3 between nodes (Config.TLS).
//
// The trust model is a private cluster CA: every certificate the CA signed
// is a member of the cluster, and nothing else is. Both ends of every
// connection present a certificate and check the other's chain against CA
// and its extended key usage (serverAuth for the accepting side, clientAuth
// for the dialing side; raftpace's node certificates carry both). Host names
// and IP addresses are not checked: nodes dial IP:port and move between
// addresses, so the CA signature is the identity. Neither is the name in the
// certificate compared with the node id. Keep the CA's private key offline
// (it is only needed to sign a new node's certificate); whoever holds it can
// mint members. To remove a member before its certificate expires, rotate the
// CA.
type TLSConfig struct {
	// CA holds the cluster CA's certificate(s): peers' chains must end there.
	CA *x509.CertPool
	// Cert is this node's certificate (chain) and private key, signed by
	// CA, with extended key usages serverAuth and clientAuth.
	Cert tls.Certificate
}

// ErrTLS is wrapped by the dialing side's errors when a connection fails
// because the two ends do not agree on TLS: one has it and the other does
// not, or a certificate is not signed by the other's cluster CA. The text
// says which.
var ErrTLS = errors.New("transport: TLS")

// LoadTLSConfig reads PEM files: caFile holds the cluster CA certificate(s),
// certFile this node's certificate (its chain may follow), keyFile its
// private key. It checks that the certificate is signed by the CA and usable
// for both ends of a connection. Every error names the files involved.
func LoadTLSConfig(caFile, certFile, keyFile string) (*TLSConfig, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := caPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA file %q: %w", caFile, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA file %q: no PEM CERTIFICATE block", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %q with key %q: %w", certFile, keyFile, err)
	}
	cfg := &TLSConfig{CA: pool, Cert: cert}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("certificate %q (CA file %q): %w", certFile, caFile, err)
	}
	return cfg, nil
}

// Check reports whether Cert is a certificate this cluster accepts: it has
// a private key, is signed by CA, is valid now, and may be used as both a
// TLS server and a TLS client.
func (c *TLSConfig) Check() error {
	if c.CA == nil {
		return errors.New("no CA pool")
	}
	if len(c.Cert.Certificate) == 0 || c.Cert.PrivateKey == nil {
		return errors.New("no certificate and private key")
	}
	leaf, err := x509.ParseCertificate(c.Cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("parsing the certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range c.Cert.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verifyChain(c.CA, leaf, inter, u); err != nil {
			return fmt.Errorf("not signed by the cluster CA or not usable here: %w", err)
		}
	}
	return nil
}

func verifyChain(ca *x509.CertPool, leaf *x509.Certificate, inter *x509.CertPool, usage x509.ExtKeyUsage) error {
	_, err := leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage {
		// x509 does not say which usage was wanted.
		return fmt.Errorf("%w (a node certificate needs the extended key usages serverAuth and clientAuth)", err)
	}
	return err
}

// verifyPeer returns a VerifyConnection callback that checks the peer's
// chain against ca for usage, without any host name.
func verifyPeer(ca *x509.CertPool, usage x509.ExtKeyUsage, role string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return &tlsVerifyError{fmt.Errorf("the %s presented no certificate", role)}
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		if err := verifyChain(ca, cs.PeerCertificates[0], inter, usage); err != nil {
			return &tlsVerifyError{fmt.Errorf("the %s's certificate (CN %q) is not valid for this cluster: %w",
				role, cs.PeerCertificates[0].Subject.CommonName, err)}
		}
		return nil
	}
}

// serverTLS is the accepting side: TLS 1.3 only, a client certificate
// required and checked against the CA (clientAuth).
func (c *TLSConfig) serverTLS() *tls.Config {
	cert := c.Cert
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              c.CA,
		SessionTicketsDisabled: true,
		// crypto/tls has already verified the chain for clientAuth; this
		// is the same check as the dialing side's, for one rule in one place.
		VerifyConnection: verifyPeer(c.CA, x509.ExtKeyUsageClientAuth, "client"),
	}
}

// clientTLS is the dialing side: TLS 1.3 only, our certificate always
// presented (even if the server names other CAs, so that it can say why it
// refuses us), and the server's chain checked against the CA (serverAuth)
// instead of a host name: nodes dial IP addresses.
func (c *TLSConfig) clientTLS() *tls.Config {
	cert := c.Cert
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		RootCAs:              c.CA,
		// The standard verification checks a host name; VerifyConnection
		// below does the chain and key-usage check without it.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   verifyPeer(c.CA, x509.ExtKeyUsageServerAuth, "peer"),
	}
}

// tlsRecordHandshake is the first byte of every TLS connection (a handshake
// record carrying the ClientHello). The stream bytes (0x01, 0x02) differ
// from it, so one byte tells a TLS dialer from a plaintext one.
const tlsRecordHandshake = 0x16

// tlsAlertRequired is what a TLS node writes to a plaintext dialer before
// closing: a fatal TLS alert record (protocol_version). A plaintext RPC
// client recognises it and says that the peer requires TLS.
var tlsAlertRequired = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46}

// isTLSAlert reports whether b starts like a TLS alert record.
func isTLSAlert(b []byte) bool { return len(b) >= 2 && b[0] == 0x15 && b[1] == 0x03 }

// prefixConn replays one byte already read from Conn.
type prefixConn struct {
	net.Conn
	first []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.first) > 0 && len(b) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// refusePlaintext answers a plaintext dialer on a TLS node with a TLS
// alert, then closes.
func (t *Transport) refusePlaintext(c *trackedConn) {
	_ = c.raw.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.raw.Write(tlsAlertRequired); err != nil {
		_ = c.Close()
		return
	}
	t.lingerClose(c)
}

// lingerClose closes a refused connection once the peer has read what was
// sent to it (the alert), or after a second: closing with the peer's bytes
// still unread would reset the connection, and a reset may overtake the
// alert and leave the peer with a bare "connection reset".
func (t *Transport) lingerClose(c *trackedConn) {
	if tc, ok := c.raw.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	_ = c.raw.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.raw, 1<<20))
	_ = c.Close()
}

// explainHandshake turns a dialer's TLS handshake failure into an error
// that says what is likely wrong.
func explainHandshake(err error) error {
	var ve *tlsVerifyError
	switch {
	case errors.As(err, &ve):
		return fmt.Errorf("%w: %w", ErrTLS, err)
	case isRemoteAlert(err):
		return fmt.Errorf("%w: the peer refused the TLS handshake (%w): does it use the same cluster CA and TLS 1.3?", ErrTLS, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%w: peer closed the connection during the TLS handshake: does it have TLS configured, with the same cluster CA? (%w)", ErrTLS, err)
	case isNotTLS(err):
		return fmt.Errorf("%w: the peer does not speak TLS (%w): does it have TLS configured?", ErrTLS, err)
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return err
}

// explainAccept turns a failure between the handshake and the peer's echo
// of the stream byte into an error that says what is likely wrong. In TLS
// 1.3 the dialer finishes its handshake before the server has checked the
// dialer's certificate, so a refusal of our certificate shows up here.
func explainAccept(err error) error {
	switch {
	case isRemoteAlert(err):
		return fmt.Errorf("%w: the peer refused this node's certificate (%w): is it signed by the cluster CA, and valid now?", ErrTLS, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%w: the peer closed the connection right after the TLS handshake (%w): did it refuse this node's certificate? (see its log)", ErrTLS, err)
	}
	return err
}

// tlsVerifyError marks errors of our own VerifyConnection.
type tlsVerifyError struct{ err error }

func (e *tlsVerifyError) Error() string { return e.err.Error() }
func (e *tlsVerifyError) Unwrap() error { return e.err }

func isRemoteAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

func isNotTLS(err error) bool {
	var rhe tls.RecordHeaderError
	return errors.As(err, &rhe)
}
