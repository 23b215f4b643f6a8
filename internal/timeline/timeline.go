package timeline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Errors. Detailed errors wrap one of these; test with errors.Is.
var (
	// ErrClosed is returned by Record after Close.
	ErrClosed = errors.New("timeline: writer closed")
	// ErrInvalidName is wrapped by errors about a node id or key that is
	// empty, too long, not UTF-8, or contains whitespace or a control
	// character. The concrete error is a *NameError.
	ErrInvalidName = errors.New("timeline: invalid name")
	// ErrInvalidTime is wrapped by errors about an event time that cannot
	// be written: not after the Unix epoch, or outside int64 nanoseconds.
	ErrInvalidTime = errors.New("timeline: invalid time")
	// ErrSyntax is wrapped by every *ParseError.
	ErrSyntax = errors.New("timeline: malformed line")
)

// MaxNameLen is the largest node id or key, in bytes, that a timeline holds.
const MaxNameLen = 4096

// maxLineLen bounds one line: 19 digits, two spaces, two names, a newline.
// Anything longer is rejected without being read into memory whole.
const maxLineLen = 19 + 1 + MaxNameLen + 1 + MaxNameLen + 1

// Event is one admitted event: the line "At Node Key".
type Event struct {
	At   int64  // unix nanoseconds, > 0
	Node string // node id that admitted the event
	Key  string // the limit's key
}

// String returns the event as a timeline line without the newline.
func (e Event) String() string {
	b := appendEvent(nil, e)
	return string(b[:len(b)-1])
}

// appendEvent appends "At Node Key\n" without validating.
func appendEvent(b []byte, e Event) []byte {
	b = strconv.AppendInt(b, e.At, 10)
	b = append(b, ' ')
	b = append(b, e.Node...)
	b = append(b, ' ')
	b = append(b, e.Key...)
	return append(b, '\n')
}

// WriteEvents writes events to w in the timeline format, in the given
// order, so that Parse returns them unchanged. It validates every event
// first and writes nothing if one is invalid.
func WriteEvents(w io.Writer, events []Event) error {
	for i, e := range events {
		if err := validateEvent(e); err != nil {
			return fmt.Errorf("timeline: event %d: %w", i, err)
		}
	}
	bw := bufio.NewWriter(w)
	var line []byte
	for _, e := range events {
		line = appendEvent(line[:0], e)
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("timeline: write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("timeline: write: %w", err)
	}
	return nil
}

func validateEvent(e Event) error {
	if e.At <= 0 {
		return fmt.Errorf("%w: %d is not after the Unix epoch", ErrInvalidTime, e.At)
	}
	if err := checkName("node id", e.Node); err != nil {
		return err
	}
	return checkName("key", e.Key)
}

// NameError reports an unusable node id or key. It wraps ErrInvalidName.
type NameError struct {
	Field  string // "node id" or "key"
	Value  string
	Reason string
}

func (e *NameError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("timeline: invalid %s %q: %s", e.Field, v, e.Reason)
}

func (e *NameError) Unwrap() error { return ErrInvalidName }

// nameProblem returns why s cannot be a node id or key, or "".
func nameProblem(s string) string {
	if s == "" {
		return "empty"
	}
	if len(s) > MaxNameLen {
		return fmt.Sprintf("%d bytes, longer than %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == 0x7f {
				return runeProblem(rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Sprintf("invalid UTF-8 at byte %d", i)
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return runeProblem(r, i)
		}
		i += size
	}
	return ""
}

func runeProblem(r rune, at int) string {
	kind := "control character"
	if unicode.IsSpace(r) {
		kind = "whitespace"
	}
	return fmt.Sprintf("contains %s %U at byte %d", kind, r, at)
}

func checkName(field, s string) error {
	if p := nameProblem(s); p != "" {
		return &NameError{Field: field, Value: s, Reason: p}
	}
	return nil
}
