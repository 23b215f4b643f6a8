package timeline

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/fuzzcorpus"
)

// FuzzParse checks that Parse never panics, that every error is a
// *ParseError naming a line, and that whatever it accepts re-serialises to
// the same bytes and parses to the same events. Seeds live in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := Parse(bytes.NewReader(data))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.Line < 1 || pe.Line > bytes.Count(data, []byte{'\n'})+1 {
				t.Fatalf("error names line %d of a %d-byte input: %v", pe.Line, len(data), err)
			}
			if evs != nil {
				t.Fatalf("events returned with an error")
			}
			return
		}
		if len(evs) != bytes.Count(data, []byte{'\n'}) {
			t.Fatalf("%d events from %d lines", len(evs), bytes.Count(data, []byte{'\n'}))
		}
		var buf bytes.Buffer
		if err := WriteEvents(&buf, evs); err != nil {
			t.Fatalf("accepted events do not serialise: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("re-serialised %q, input was %q", buf.Bytes(), data)
		}
		again, err := Parse(&buf)
		if err != nil || !slices.Equal(again, evs) {
			t.Fatalf("re-parse: %v, %v; first parse %v", again, err, evs)
		}
		// Check must cope with whatever Parse accepts.
		if len(evs) > 0 {
			_ = Check(evs, evs[0].Key, Spec{Limit: Limit{Rate: 1, Burst: 1}}).String()
		}
	})
}

// writerSeeds are FuzzWriterRoundTrip's seeds: files written by real
// Writers (valid-*), and near misses of them (invalid-*).
func writerSeeds(t testing.TB) map[string][]byte {
	dir := t.TempDir()
	write := func(name string, recs ...Event) []byte {
		path := filepath.Join(dir, name)
		ws := map[string]*Writer{}
		for _, e := range recs {
			w := ws[e.Node]
			if w == nil {
				var err error
				if w, err = NewWriter(path, e.Node); err != nil {
					t.Fatal(err)
				}
				ws[e.Node] = w
			}
			if err := w.Record(e.Key, time.Unix(0, e.At)); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range ws {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := strings.Repeat("x", MaxNameLen)
	seeds := map[string][]byte{
		"valid-one":       write("one", Event{1_700_000_000_123_456_789, "n1", "provider:acme/cred:42"}),
		"valid-two-nodes": write("two", Event{3, "n2", "b"}, Event{1, "n1", "a"}, Event{2, "n1", "a"}),
		"valid-unicode":   write("unicode", Event{6, "nœud", "clé€"}),
		"valid-max":       write("max", Event{math.MaxInt64, long, long}),
		"valid-min":       write("min", Event{1, "n", "k"}),
	}
	one := seeds["valid-one"]
	seeds["invalid-no-newline"] = one[:len(one)-1]
	seeds["invalid-crlf"] = append(bytes.Clone(one[:len(one)-1]), '\r', '\n')
	seeds["invalid-name-too-long"] = []byte("1 n " + long + "x\n")
	seeds["invalid-overflow"] = []byte("9223372036854775808 n k\n")
	seeds["invalid-nbsp"] = []byte("1 n a\u00a0b\n")
	seeds["invalid-line-too-long"] = []byte("1 n " + strings.Repeat("k", 70_000) + "\n")
	return seeds
}

// TestFuzzCorpus checks that testdata/fuzz/FuzzWriterRoundTrip holds what
// writerSeeds generates; run with -update-corpus to rewrite it.
func TestFuzzCorpus(t *testing.T) {
	for name, b := range writerSeeds(t) {
		_, err := Parse(bytes.NewReader(b))
		if valid := strings.HasPrefix(name, "valid-"); valid != (err == nil) {
			t.Errorf("seed %s: Parse error %v", name, err)
		}
		fuzzcorpus.Check(t, "FuzzWriterRoundTrip", name, b)
	}
}

// FuzzWriterRoundTrip checks that whatever Parse accepts is exactly what
// Writers write: recording the parsed events, in order, each through a
// Writer for its node (several Writers appending to one file, as processes
// may), reproduces the input byte for byte; and each line is its event's
// String. Seeds are writerSeeds, checked in under
// testdata/fuzz/FuzzWriterRoundTrip.
func FuzzWriterRoundTrip(f *testing.F) {
	for _, b := range writerSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := Parse(bytes.NewReader(data))
		if err != nil {
			return // FuzzParse checks the errors
		}
		path := filepath.Join(t.TempDir(), "timeline")
		ws := map[string]*Writer{}
		defer func() {
			for _, w := range ws {
				w.Close()
			}
		}()
		var lines bytes.Buffer
		for _, e := range evs {
			w := ws[e.Node]
			if w == nil {
				if w, err = NewWriter(path, e.Node); err != nil {
					t.Fatalf("NewWriter for parsed node id %q: %v", e.Node, err)
				}
				ws[e.Node] = w
			}
			if err := w.Record(e.Key, time.Unix(0, e.At)); err != nil {
				t.Fatalf("Record of parsed event %v: %v", e, err)
			}
			lines.WriteString(e.String())
			lines.WriteByte('\n')
		}
		got, err := os.ReadFile(path)
		if err != nil && !(len(evs) == 0 && errors.Is(err, os.ErrNotExist)) {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("Writers wrote %q, input was %q", got, data)
		}
		if !bytes.Equal(lines.Bytes(), data) {
			t.Fatalf("Event.String lines %q, input was %q", lines.Bytes(), data)
		}
	})
}
