package main

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
	"regexp"
	"slices"
	"strings"
	"time"
)

const tlsUsage = `Usage: raftpace tls init [--dir DIR] [--force]
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

// Validity of what tls writes.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	nodeValidity = 3 * 365 * 24 * time.Hour
)

// tlsNameRE is what tls node accepts as NAME: it becomes a file name.
var tlsNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (c *cli) tls(name string, args []string) error {
	// The subcommand is the first argument that is not a flag or a flag's
	// value (only --dir takes one).
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			sub = i
			break
		}
		n, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case n == "h" || n == "help":
			fmt.Fprint(c.stdout, tlsUsage)
			return errHelp
		case n == "dir" && !hasValue:
			i++
		}
	}
	if sub < 0 || args[sub] == "--" {
		return &usageError{cmd: "tls", msg: "missing subcommand: init or node", usage: tlsUsage}
	}
	rest := append(slices.Clone(args[:sub]), args[sub+1:]...)
	switch args[sub] {
	case "init":
		return c.tlsInit(rest)
	case "node":
		return c.tlsNode(rest)
	case "help":
		fmt.Fprint(c.stdout, tlsUsage)
		return errHelp
	}
	return &usageError{cmd: "tls", msg: fmt.Sprintf("unknown subcommand %q: want init or node", args[sub]), usage: tlsUsage}
}

func tlsFlags(cmd, synopsis, about string) (*flags, *string, *bool) {
	f := newFlags(cmd, synopsis, about)
	dir := f.String("dir", ".", "`DIR` holding the CA files and where the new files go")
	force := f.Bool("force", false, "overwrite existing files")
	return f, dir, force
}

func (c *cli) tlsInit(args []string) error {
	f, dir, force := tlsFlags("tls init", "[--dir DIR] [--force]",
		"Writes a new cluster CA (ca.pem, ca-key.pem) and gossip key (gossip.key) in DIR.\nRun 'raftpace tls -h' for the whole story.")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.noArgs(pos); err != nil {
		return err
	}
	ca, err := newClusterCA()
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	gossip, err := newGossipKey()
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	files := []secretFile{
		{name: "ca.pem", data: ca.certPEM, mode: 0o644},
		{name: "ca-key.pem", data: ca.keyPEM, mode: 0o600},
		{name: "gossip.key", data: []byte(gossip + "\n"), mode: 0o600},
	}
	if err := writeSecretFiles(*dir, files, *force); err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	fmt.Fprintf(c.stdout, "wrote %s (the cluster CA %q: every node's --tls-ca)\n", filepath.Join(*dir, "ca.pem"), ca.cert.Subject.CommonName)
	fmt.Fprintf(c.stdout, "wrote %s (the CA's private key: keep it offline; only 'tls node' needs it)\n", filepath.Join(*dir, "ca-key.pem"))
	fmt.Fprintf(c.stdout, "wrote %s (every node's --gossip-key-file)\n", filepath.Join(*dir, "gossip.key"))
	fmt.Fprintf(c.stdout, "next: raftpace tls node NAME --dir %s, once per node\n", *dir)
	return nil
}

func (c *cli) tlsNode(args []string) error {
	f, dir, force := tlsFlags("tls node", "NAME [--dir DIR] [--force]",
		"Writes NAME.pem and NAME-key.pem in DIR: a node certificate signed by the CA\nin DIR (ca.pem, ca-key.pem). Run 'raftpace tls -h' for the whole story.")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return f.usageError("NAME is required")
	case len(pos) > 1:
		return f.usageError("unexpected argument %q (one NAME at a time)", pos[1])
	}
	name := pos[0]
	if !tlsNameRE.MatchString(name) || name == "ca" || name == "ca-key" || name == "gossip" {
		return f.usageError("NAME %q: must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, and not ca, ca-key or gossip", name)
	}
	ca, err := loadClusterCA(*dir)
	if err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	certPEM, keyPEM, err := ca.issue(name)
	if err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	files := []secretFile{
		{name: name + ".pem", data: certPEM, mode: 0o644},
		{name: name + "-key.pem", data: keyPEM, mode: 0o600},
	}
	if err := writeSecretFiles(*dir, files, *force); err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	cert, key := filepath.Join(*dir, name+".pem"), filepath.Join(*dir, name+"-key.pem")
	fmt.Fprintf(c.stdout, "wrote %s and %s (CN=%s, valid until %s)\n", cert, key, name, time.Now().Add(nodeValidity).Format("2006-01-02"))
	fmt.Fprintf(c.stdout, "agent flags: --tls-ca %s --tls-cert %s --tls-key %s --gossip-key-file %s\n",
		filepath.Join(*dir, "ca.pem"), cert, key, filepath.Join(*dir, "gossip.key"))
	return nil
}

// clusterCA is a CA certificate with its key.
type clusterCA struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

// newClusterCA makes a self-signed ECDSA P-256 CA.
func newClusterCA() (*clusterCA, error) {
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
		NotAfter:              now.Add(caValidity),
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
	return &clusterCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// loadClusterCA reads ca.pem and ca-key.pem from dir.
func loadClusterCA(dir string) (*clusterCA, error) {
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
	return &clusterCA{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// issue signs a node certificate for name: CN=name, serverAuth and
// clientAuth, valid nodeValidity (never past the CA).
func (ca *clusterCA) issue(name string) (certPEM, keyPEM []byte, err error) {
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
		NotAfter:     now.Add(nodeValidity),
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

// newGossipKey returns the base64 of 32 random bytes.
func newGossipKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// secretFile is one file tls writes.
type secretFile struct {
	name string
	data []byte
	mode os.FileMode
}

// writeSecretFiles writes files into dir (created 0700 if missing), each
// through a temporary file renamed into place with its mode already set.
// Unless force, it refuses, before writing anything, if any file exists.
func writeSecretFiles(dir string, files []secretFile, force bool) error {
	if !force {
		var exist []string
		for _, f := range files {
			p := filepath.Join(dir, f.name)
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
		if err := writeFileMode(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func writeFileMode(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeThrowawaySecurity writes, in dir, a new CA, a certificate for each
// name and a gossip key, for a cluster that lives as long as dir (the demo).
// It returns the gossip key file.
func writeThrowawaySecurity(dir string, names []string) (gossipKeyFile string, err error) {
	ca, err := newClusterCA()
	if err != nil {
		return "", err
	}
	gossip, err := newGossipKey()
	if err != nil {
		return "", err
	}
	// The CA's key is not written: nothing else will be signed.
	files := []secretFile{{name: "ca.pem", data: ca.certPEM, mode: 0o644}, {name: "gossip.key", data: []byte(gossip + "\n"), mode: 0o600}}
	for _, n := range names {
		c, k, err := ca.issue(n)
		if err != nil {
			return "", err
		}
		files = append(files, secretFile{name: n + ".pem", data: c, mode: 0o644}, secretFile{name: n + "-key.pem", data: k, mode: 0o600})
	}
	if err := writeSecretFiles(dir, files, false); err != nil {
		return "", err
	}
	return filepath.Join(dir, "gossip.key"), nil
}
