// Package certs makes what secures a raftpace cluster, as files: a private
// cluster CA (ECDSA P-256, self-signed), node certificates it signs (usable
// as TLS server and client) and the gossip encryption key. It promises
// that private keys and gossip keys are written with mode 0600, each file
// through a temporary file renamed into place, and that WriteFiles refuses,
// before writing anything, to overwrite an existing file unless forced. It
// does not load TLS configurations for a node (transport does); its
// messages suggest the tls command's flags (--dir, --force) where the
// operator must act.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/atomicfile"
)

// Validity of what this package signs.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	NodeValidity = 3 * 365 * 24 * time.Hour
)

// CA is a cluster CA: its certificate and private key, parsed and as PEM.
type CA struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	CertPEM, KeyPEM []byte
}

// Name is the CA's common name ("raftpace cluster CA 1a2b3c4d").
func (ca *CA) Name() string { return ca.cert.Subject.CommonName }

// NewCA makes a self-signed ECDSA P-256 CA.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// A name of its own, so that messages about two CAs tell them apart.
	name := "raftpace cluster CA " + shortID(serial)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"raftpace"}},
		NotBefore:             now.Add(-time.Hour), // some clock skew between hosts
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // signs node certificates only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// LoadCA reads ca.pem and ca-key.pem from dir.
func LoadCA(dir string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w (run 'raftpace tls init --dir %s' first)", err, dir)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA's key: %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM CERTIFICATE block", certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", certFile)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s: no PEM block", keyFile)
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyFile, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s: a %T, want an ECDSA key", keyFile, k)
		}
		key = ek
	case "EC PRIVATE KEY":
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", keyFile, err)
		}
	default:
		return nil, fmt.Errorf("%s: PEM block %q, want PRIVATE KEY", keyFile, kb.Type)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to the CA certificate %s", keyFile, certFile)
	}
	return &CA{cert: cert, key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Issue signs a node certificate for name: CN=name, serverAuth and
// clientAuth, valid NodeValidity (never past the CA).
func (ca *CA) Issue(name string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"raftpace"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(NodeValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca.cert.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter // never past the CA
	}
	if tmpl.NotAfter.Before(now) {
		return nil, nil, fmt.Errorf("the CA expired on %s", ca.cert.NotAfter.Format(time.DateOnly))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// shortID is the first 8 hex digits of n.
func shortID(n *big.Int) string {
	id := n.Text(16)
	return id[:min(8, len(id))]
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewGossipKey returns the base64 of 32 random bytes.
func NewGossipKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// File is one file WriteFiles writes.
type File struct {
	Name string // a file name in the directory WriteFiles writes to
	Data []byte
	Mode os.FileMode
}

// WriteFiles writes files into dir (created 0700 if missing), each
// through a temporary file renamed into place with its mode already set.
// Unless force, it refuses, before writing anything, if any file exists.
func WriteFiles(dir string, files []File, force bool) error {
	if !force {
		var exist []string
		for _, f := range files {
			p := filepath.Join(dir, f.Name)
			if _, err := os.Lstat(p); err == nil {
				exist = append(exist, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("refusing to overwrite %s (use --force to replace)", strings.Join(exist, ", "))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		if err := atomicfile.Write(filepath.Join(dir, f.Name), f.Data, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// WriteThrowaway writes, in dir, a new CA, a certificate for each
// name and a gossip key, for a cluster that lives as long as dir (the demo).
// It returns the gossip key file.
func WriteThrowaway(dir string, names []string) (gossipKeyFile string, err error) {
	ca, err := NewCA()
	if err != nil {
		return "", err
	}
	gossip, err := NewGossipKey()
	if err != nil {
		return "", err
	}
	// The CA's key is not written: nothing else will be signed.
	files := []File{{Name: "ca.pem", Data: ca.CertPEM, Mode: 0o644}, {Name: "gossip.key", Data: []byte(gossip + "\n"), Mode: 0o600}}
	for _, n := range names {
		c, k, err := ca.Issue(n)
		if err != nil {
			return "", err
		}
		files = append(files, File{Name: n + ".pem", Data: c, Mode: 0o644}, File{Name: n + "-key.pem", Data: k, Mode: 0o600})
	}
	if err := WriteFiles(dir, files, false); err != nil {
		return "", err
	}
	return filepath.Join(dir, "gossip.key"), nil
}

// Usage is `raftpace tls -h`.
const Usage = `Usage: raftpace tls init [--dir DIR] [--force]
       raftpace tls node NAME [--dir DIR] [--force]

Creates what secures a cluster: a private CA for mutual TLS between nodes
(raft and RPC), node certificates, and the key that encrypts gossip.

  tls init       writes, in --dir, ca.pem (the cluster CA certificate: every
                 node's --tls-ca), ca-key.pem (its private key, needed only
                 by 'tls node': keep it offline) and gossip.key (every node's
                 --gossip-key-file). ECDSA P-256; the CA is valid 10 years.
  tls node NAME  writes NAME.pem and NAME-key.pem (the node's --tls-cert and
                 --tls-key), signed by the CA in --dir, CN=NAME, usable as
                 TLS server and client, valid 3 years.

Trust model: every certificate this CA signed is a member of the cluster;
host names and IP addresses are not checked (nodes dial IP addresses), nor
is NAME compared with the node id. Whoever holds ca-key.pem can add
members. To remove one before its certificate expires, make a new CA.

Private keys and gossip.key are written with mode 0600. Existing files are
never overwritten without --force.

Then, on every node:
  raftpace agent --tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem \
    --tls-key DIR/NAME-key.pem --gossip-key-file DIR/gossip.key ...
`
