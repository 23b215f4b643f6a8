package timeline

import (
	"bytes"
	"errors"
	"slices"
	"testing"
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
