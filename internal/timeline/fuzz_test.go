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
// the same bytes and parses to the same events; a torn last line (see
// TornTail) re-serialises completed with its newline when it was counted,
// and not at all when it was dropped. Seeds live in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, torn, err := ParseTorn(bytes.NewReader(data))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.Line < 1 || pe.Line > bytes.Count(data, []byte{'\n'})+1 {
				t.Fatalf("error names line %d of a %d-byte input: %v", pe.Line, len(data), err)
			}
			if evs != nil || torn != nil {
				t.Fatalf("events or a torn tail returned with an error")
			}
			return
		}
		if plain, err := Parse(bytes.NewReader(data)); err != nil || !slices.Equal(plain, evs) {
			t.Fatalf("Parse = %v, %v; ParseTorn = %v", plain, err, evs)
		}
		lines := bytes.Count(data, []byte{'\n'})
		whole := data[:bytes.LastIndexByte(data, '\n')+1]
		want := data
		switch {
		case torn == nil:
			if len(whole) != len(data) {
				t.Fatalf("no torn tail reported for %q", data[len(whole):])
			}
		case torn.Bytes != len(data)-len(whole) || torn.Line != lines+1:
			t.Fatalf("torn tail %+v of a %d-line input ending in %q", torn, lines, data[len(whole):])
		case torn.Counted:
			lines++
			want = append(bytes.Clone(data), '\n')
			if evs[len(evs)-1] != torn.Event {
				t.Fatalf("counted torn event %v is not the last event %v", torn.Event, evs[len(evs)-1])
			}
		default:
			want = whole
		}
		if len(evs) != lines {
			t.Fatalf("%d events from %d lines", len(evs), lines)
		}
		var buf bytes.Buffer
		if err := WriteEvents(&buf, evs); err != nil {
			t.Fatalf("accepted events do not serialise: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("re-serialised %q, want %q", buf.Bytes(), want)
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
	// Torn last lines, as a writer killed while recording leaves them:
	// accepted (counted or dropped), and repaired by NewWriter.
	seeds["torn-no-newline"] = one[:len(one)-1]
	seeds["torn-in-node"] = append(bytes.Clone(seeds["valid-two-nodes"]), "4 n"...)
	seeds["torn-in-character"] = append(bytes.Clone(one), "5 nœud cl\xc3"...)
	seeds["invalid-last-line"] = append(bytes.Clone(one), "5 n k x"...)
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
		_, torn, err := ParseTorn(bytes.NewReader(b))
		if invalid := strings.HasPrefix(name, "invalid-"); invalid != (err != nil) {
			t.Errorf("seed %s: Parse error %v", name, err)
		}
		if isTorn := strings.HasPrefix(name, "torn-"); isTorn != (torn != nil) {
			t.Errorf("seed %s: torn tail %+v", name, torn)
		}
		fuzzcorpus.Check(t, "FuzzWriterRoundTrip", name, b)
	}
}

// FuzzWriterRoundTrip checks that whatever Parse accepts is exactly what
// Writers write: recording the parsed events, in order, each through a
// Writer for its node (several Writers appending to one file, as processes
// may), reproduces the input byte for byte (a torn last line completed or
// dropped, as Parse counted it); and each line is its event's String. It
// also checks that a Writer opened on the input itself (a restart) repairs
// a torn last line and appends after the events Parse returned. Seeds are
// writerSeeds, checked in under testdata/fuzz/FuzzWriterRoundTrip.
func FuzzWriterRoundTrip(f *testing.F) {
	for _, b := range writerSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, torn, err := ParseTorn(bytes.NewReader(data))
		if err != nil {
			return // FuzzParse checks the errors
		}
		want := data
		if torn != nil {
			want = data[:len(data)-torn.Bytes]
			if torn.Counted {
				want = append(bytes.Clone(data), '\n')
			}
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "timeline")
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
		if !bytes.Equal(got, want) {
			t.Fatalf("Writers wrote %q, want %q", got, want)
		}
		if !bytes.Equal(lines.Bytes(), want) {
			t.Fatalf("Event.String lines %q, want %q", lines.Bytes(), want)
		}

		// A restart on the input: repaired, appended to, same events.
		restart := filepath.Join(dir, "restart")
		if err := os.WriteFile(restart, data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := NewWriter(restart, "restarted")
		if err != nil {
			t.Fatalf("NewWriter on an input Parse accepts: %v", err)
		}
		if r := w.Repaired(); (r == nil) != (torn == nil) || r != nil && (r.Bytes != torn.Bytes || r.Counted != torn.Counted) {
			t.Fatalf("Repaired() = %+v, ParseTorn found %+v", r, torn)
		}
		if err := w.Record("k", time.Unix(0, 1)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(restart)
		if err != nil {
			t.Fatal(err)
		}
		if wantB := append(bytes.Clone(want), "1 restarted k\n"...); !bytes.Equal(b, wantB) {
			t.Fatalf("after a restart the file holds %q, want %q", b, wantB)
		}
	})
}
