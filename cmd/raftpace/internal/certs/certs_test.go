package certs

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A CA written with WriteFiles loads back, and signs node certificates
// that verify against it for both TLS roles.
func TestCA_RoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	files := []File{{Name: "ca.pem", Data: ca.CertPEM, Mode: 0o644}, {Name: "ca-key.pem", Data: ca.KeyPEM, Mode: 0o600}}
	if err := WriteFiles(dir, files, false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca-key.pem: %v %v", fi.Mode(), err)
	}
	if err := WriteFiles(dir, files, false); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("second WriteFiles: %v", err)
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Name() != ca.Name() || !strings.HasPrefix(ca.Name(), "raftpace cluster CA ") {
		t.Errorf("names %q, %q", loaded.Name(), ca.Name())
	}
	certPEM, _, err := loaded.Issue("n1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
	if cert.Subject.CommonName != "n1" {
		t.Errorf("CN %q", cert.Subject.CommonName)
	}
}

func TestWriteThrowaway(t *testing.T) {
	dir := t.TempDir()
	gossip, err := WriteThrowaway(dir, []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "gossip.key", "n1.pem", "n1-key.pem", "n2.pem", "n2-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !os.IsNotExist(err) {
		t.Errorf("the throwaway CA's key was written: %v", err)
	}
	if gossip != filepath.Join(dir, "gossip.key") {
		t.Errorf("gossip key file %q", gossip)
	}
}
