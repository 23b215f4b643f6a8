package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A dir is claimed by the first id started on it (a new dir, or one of a
// build before the claim), kept by it across restarts, and refused to
// another id with both named.
func TestClaim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	if err := Claim(dir, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := Claim(dir, "n1"); err != nil {
		t.Fatalf("the same id again: %v", err)
	}
	err := Claim(dir, "worker-7")
	if !errors.Is(err, ErrOtherNode) || !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), `"worker-7"`) {
		t.Fatalf("another id: %v; want ErrOtherNode naming both ids", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, File)); string(b) != "n1\n" {
		t.Fatalf("the refused claim changed the file: %q", b)
	}

	old := t.TempDir() // raft state, no File: claimed by the id given
	if err := os.WriteFile(filepath.Join(old, "raft.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Claim(old, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := Claim(old, "n3"); !errors.Is(err, ErrOtherNode) {
		t.Fatalf("after the first claim: %v", err)
	}

	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Claim(filepath.Join(file, "d"), "n1"); err == nil || errors.Is(err, ErrOtherNode) {
		t.Fatalf("a dir under a file: %v; want the file system's error", err)
	}
}
