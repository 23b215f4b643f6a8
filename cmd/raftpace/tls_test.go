package main

import (
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftpace/raftpace/transport"
)

func TestTLSCommands(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pki")
	r := mustRun(t, 0, "tls", "init", "--dir", dir)
	if !strings.Contains(r.stdout, "ca-key.pem (the CA's private key: keep it offline") {
		t.Errorf("tls init output:\n%s", r.stdout)
	}
	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "gossip.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err != nil || len(key) != 32 {
		t.Errorf("gossip.key: %d bytes, %v; want base64 of 32 bytes", len(key), err)
	}

	// Flags before the subcommand work too.
	r = mustRun(t, 0, "tls", "--dir", dir, "node", "n1")
	if !strings.Contains(r.stdout, "--tls-cert "+filepath.Join(dir, "n1.pem")) {
		t.Errorf("tls node output:\n%s", r.stdout)
	}
	if fi, err := os.Stat(filepath.Join(dir, "n1-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("n1-key.pem: %v %v", fi, err)
	}
	cfg, err := transport.LoadTLSConfig(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"))
	if err != nil {
		t.Fatalf("the files tls wrote do not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(cfg.Cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "n1" || len(leaf.ExtKeyUsage) != 2 {
		t.Errorf("certificate: CN %q, usages %v", leaf.Subject.CommonName, leaf.ExtKeyUsage)
	}
	if years := leaf.NotAfter.Sub(leaf.NotBefore).Hours() / 24 / 365; years < 2 || years > 5 {
		t.Errorf("certificate valid %.1f years", years)
	}

	// Nothing is overwritten without --force.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	r = mustRun(t, 1, "tls", "init", "--dir", dir)
	if !strings.Contains(r.stderr, "refusing to overwrite") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("tls init over existing files:\n%s", r.stderr)
	}
	r = mustRun(t, 1, "tls", "node", "n1", "--dir", dir)
	if !strings.Contains(r.stderr, "n1.pem") || !strings.Contains(r.stderr, "refusing to overwrite") {
		t.Errorf("tls node over existing files:\n%s", r.stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(after) != string(before) {
		t.Fatal("ca.pem changed")
	}
	mustRun(t, 0, "tls", "node", "n1", "--dir", dir, "--force")

	// A certificate from a new CA is refused with the old CA, naming files.
	mustRun(t, 0, "tls", "init", "--dir", dir, "--force")
	_, err = transport.LoadTLSConfig(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"))
	if err == nil || !strings.Contains(err.Error(), "unknown authority") || !strings.Contains(err.Error(), "n1.pem") {
		t.Errorf("old certificate with a new CA: %v", err)
	}

	// Usage errors.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tls"}, 2, "missing subcommand: init or node"},
		{[]string{"tls", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"tls", "node", "--dir", dir}, 2, "NAME is required"},
		{[]string{"tls", "node", "../x", "--dir", dir}, 2, `NAME "../x": must be`},
		{[]string{"tls", "node", "ca", "--dir", dir}, 2, `NAME "ca"`},
		{[]string{"tls", "node", "n2", "--dir", filepath.Join(dir, "nope")}, 1, "run 'raftpace tls init"},
		{[]string{"tls", "-h"}, 0, ""},
		{[]string{"help", "tls", "node"}, 0, ""},
	} {
		r := runCLI(t.Context(), nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("raftpace %q: exit %d, stderr %q; want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func TestAgent_SecurityConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustRun(t, 0, "tls", "init", "--dir", filepath.Join(dir, "a"))
	mustRun(t, 0, "tls", "node", "n1", "--dir", filepath.Join(dir, "a"))
	mustRun(t, 0, "tls", "init", "--dir", filepath.Join(dir, "b"))
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"agent", "--node-id", "t1", "--data-dir", filepath.Join(dir, "data"),
		"--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0"}
	a := func(p string) string { return filepath.Join(dir, "a", p) }
	b := func(p string) string { return filepath.Join(dir, "b", p) }
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"partial TLS", []string{"--http", "off", "--tls-cert", a("n1.pem")}, nil, []string{
			"--tls-ca, --tls-cert and --tls-key must be given together (--tls-cert given, --tls-ca, --tls-key missing)"}},
		{"certificate of another CA", []string{"--http", "off", "--tls-ca", b("ca.pem"), "--tls-cert", a("n1.pem"), "--tls-key", a("n1-key.pem")}, nil, []string{
			"invalid configuration:\n  TLS: certificate", a("n1.pem"), b("ca.pem"), "not signed by the cluster CA", "unknown authority"}},
		{"bad gossip key", []string{"--http", "off", "--gossip-key-file", a("ca.pem")}, nil, []string{
			`--gossip-key-file "` + a("ca.pem"), "base64"}},
		{"http on every interface without a token", []string{"--http", "0.0.0.0:0"}, nil, []string{
			`--http "0.0.0.0:0" on a non-loopback address needs --http-token-file`}},
		{"http without host", []string{"--http", ":0"}, nil, []string{`--http ":0" on a non-loopback address`}},
		{"short token", []string{"--http", "0.0.0.0:0", "--http-token-file", tokenFile}, nil, []string{
			"--http-token-file: token file", "at least 16 characters"}},
		{"token twice", []string{"--http-token-file", tokenFile}, map[string]string{"RAFTPACE_HTTP_TOKEN": "0123456789abcdef0"}, []string{
			"--http-token-file and RAFTPACE_HTTP_TOKEN are both set"}},
		{"env", []string{"--http", "off"}, map[string]string{"RAFTPACE_TLS_CA": a("ca.pem")}, []string{
			"--tls-ca (from RAFTPACE_TLS_CA), --tls-cert and --tls-key must be given together"}},
	}
	for _, tc := range tests {
		r := runCLI(t.Context(), tc.env, append(append([]string(nil), base...), tc.args...)...)
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2\nstderr: %s", tc.name, r.code, r.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, r.stderr)
			}
		}
	}
}
