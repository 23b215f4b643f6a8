package timeline

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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

// ParseError reports a malformed timeline line. It wraps ErrSyntax.
type ParseError struct {
	Path string // file name, when known (ParseFiles)
	Line int    // 1-based line number
	Msg  string // what was wrong
}

func (e *ParseError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("timeline: %s: line %d: %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("timeline: line %d: %s", e.Line, e.Msg)
}

func (e *ParseError) Unwrap() error { return ErrSyntax }

// Parse reads a timeline and returns its events in file order. It accepts
// exactly the lines Writer and WriteEvents produce; see the package
// documentation for the format. The first malformed line ends the parse:
// Parse then returns no events and a *ParseError naming that line. Empty
// input yields no events and no error. An error from r is returned
// wrapped, not as a *ParseError.
func Parse(r io.Reader) ([]Event, error) {
	return parse(r, "")
}

func parse(r io.Reader, path string) ([]Event, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		events []Event
		intern = make(map[string]string)
		long   []byte // holds a line that straddles the reader's buffer
	)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLineLen {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > maxLineLen {
			return nil, &ParseError{Path: path, Line: lineNo,
				Msg: fmt.Sprintf("line longer than %d bytes", maxLineLen)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if path != "" {
				return nil, fmt.Errorf("timeline: read %s: %w", path, err)
			}
			return nil, fmt.Errorf("timeline: read: %w", err)
		}
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return events, nil
			}
			return nil, &ParseError{Path: path, Line: lineNo,
				Msg: "truncated: last line has no trailing newline"}
		}
		ev, msg := parseLine(line[:len(line)-1], intern)
		if msg != "" {
			return nil, &ParseError{Path: path, Line: lineNo, Msg: msg}
		}
		events = append(events, ev)
	}
}

// parseLine parses one line without its newline. It returns a non-empty
// message when the line is malformed.
func parseLine(b []byte, intern map[string]string) (Event, string) {
	if len(b) == 0 {
		return Event{}, "empty line; want \"unix_nanos node_id key\""
	}
	// Reject stray bytes first so that a tab or CR is named as such rather
	// than reported as a missing field.
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == 0x7f {
				return Event{}, runeProblem(rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return Event{}, fmt.Sprintf("invalid UTF-8 at byte %d", i)
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return Event{}, runeProblem(r, i)
		}
		i += size
	}
	var fields [3][]byte
	nf := 0
	for i, rest := 0, b; ; i++ {
		f, after, more := bytes.Cut(rest, []byte{' '})
		if len(f) == 0 {
			switch {
			case i == 0:
				return Event{}, "leading space"
			case !more:
				return Event{}, "trailing space"
			default:
				return Event{}, fmt.Sprintf("two spaces in a row after field %d", i)
			}
		}
		if i < len(fields) {
			fields[i] = f
		}
		nf++
		if !more {
			break
		}
		rest = after
	}
	switch {
	case nf == 1:
		return Event{}, "missing node id and key; want \"unix_nanos node_id key\""
	case nf == 2:
		return Event{}, "missing key; want \"unix_nanos node_id key\""
	case nf > 3:
		return Event{}, fmt.Sprintf("%d fields, want 3: \"unix_nanos node_id key\"", nf)
	}
	at, msg := parseTime(fields[0])
	if msg != "" {
		return Event{}, msg
	}
	node, msg := internName("node id", fields[1], intern)
	if msg != "" {
		return Event{}, msg
	}
	key, msg := internName("key", fields[2], intern)
	if msg != "" {
		return Event{}, msg
	}
	return Event{At: at, Node: node, Key: key}, ""
}

// parseTime accepts only the canonical decimal form of a positive int64:
// digits, no sign, no leading zero.
func parseTime(f []byte) (int64, string) {
	if len(f) == 0 {
		return 0, "empty time"
	}
	if f[0] == '-' {
		if _, err := strconv.ParseInt(string(f), 10, 64); err == nil {
			return 0, fmt.Sprintf("time %s is not positive", f)
		}
	}
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, fmt.Sprintf("bad time %q: want a positive decimal integer of unix nanoseconds", f)
		}
	}
	if len(f) == 1 && f[0] == '0' {
		return 0, "time 0 is not positive"
	}
	if f[0] == '0' {
		return 0, fmt.Sprintf("bad time %q: leading zero", f)
	}
	at, err := strconv.ParseInt(string(f), 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("bad time %q: out of int64 range", f)
	}
	return at, ""
}

func internName(field string, b []byte, intern map[string]string) (string, string) {
	if s, ok := intern[string(b)]; ok {
		return s, ""
	}
	if len(b) > MaxNameLen {
		return "", fmt.Sprintf("%s is %d bytes, longer than %d", field, len(b), MaxNameLen)
	}
	s := string(b)
	intern[s] = s
	return s, ""
}

// ParseFiles parses each file and returns all their events merged and
// sorted by At (ties by Node, then Key, so the result does not depend on
// the order of paths). Errors name the file and line.
func ParseFiles(paths ...string) ([]Event, error) {
	var all []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("timeline: %w", err)
		}
		evs, err := parse(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	slices.SortFunc(all, compareEvents)
	return all, nil
}

func compareEvents(a, b Event) int {
	if c := cmp.Compare(a.At, b.At); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}
