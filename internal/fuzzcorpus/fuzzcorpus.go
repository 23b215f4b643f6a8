// Package fuzzcorpus keeps a package's checked-in fuzz seed corpora equal to
// the seeds its tests generate, so that `go test` replays real encodings
// and a changed codec cannot leave stale seeds behind. Only tests import it.
//
// A package's TestFuzzCorpus calls Check once per seed; `go test -run
// TestFuzzCorpus -update-corpus` rewrites the files instead of comparing.
// Files in the corpus directory that no seed names (found by the fuzzer)
// are left alone.
package fuzzcorpus

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update-corpus", false, "rewrite the generated seed corpora under testdata/fuzz")

// File renders one []byte input in Go's fuzz corpus file format.
func File(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
}

// Check compares testdata/fuzz/<target>/<name> with File(b), reporting a
// missing or stale file as an error; with -update-corpus it writes the file.
func Check(t testing.TB, target, name string, b []byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	path := filepath.Join(dir, name)
	want := File(b)
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("seed corpus file missing (run go test -run TestFuzzCorpus -update-corpus): %v", err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale; run go test -run TestFuzzCorpus -update-corpus", path)
	}
}
