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
//
// A last line without its newline is the torn record of a writer killed
// while recording it (see TornTail): it is counted when it holds a whole
// event and dropped otherwise. ParseTorn also says which.
func Parse(r io.Reader) ([]Event, error) {
	evs, _, err := parse(r, "")
	return evs, err
}

// ParseTorn is Parse that also returns the torn last line, if the input
// ends in one (nil otherwise).
func ParseTorn(r io.Reader) ([]Event, *TornTail, error) {
	return parse(r, "")
}

// TornTail describes a last line with no newline. Writer writes each line
// with one write(2), but the kernel copies a write into the page cache a
// page at a time and lets a SIGKILL end it between pages, so a process
// killed while recording an event (a Record that never returned, so an
// event never acknowledged) can leave the start of its line at the end of
// the file. Whatever prefix of a line is left is accepted there, and only
// there; anything else is a *ParseError as in the middle of a file.
//
// The checker judges a ceiling, so a torn line is never silently lost: if
// it still holds a whole "unix_nanos node_id key" it is counted as an
// event (it was admitted; its key may be cut short if the write was torn
// inside the key, which counts it under the shorter key), and an
// incomplete one is dropped. Callers should report it either way (String).
type TornTail struct {
	Path    string // file name, when known (ParseFiles, Writer)
	Line    int    // 1-based line number; 0 when not known (Writer.Repaired)
	Bytes   int    // length of the torn line
	Counted bool   // it held a whole event, Event, which is among the events
	Event   Event  // the counted event; zero when not Counted
}

func (t TornTail) String() string {
	where := "timeline: "
	if t.Path != "" {
		where += t.Path + ": "
	}
	if t.Line > 0 {
		where += fmt.Sprintf("line %d: ", t.Line)
	}
	if t.Counted {
		return fmt.Sprintf("%storn last line (%d bytes, no newline; a writer killed while recording it) counted as the event %q",
			where, t.Bytes, t.Event.String())
	}
	return fmt.Sprintf("%storn last line (%d bytes, no newline; a writer killed while recording it) dropped: it holds no whole event",
		where, t.Bytes)
}

func parse(r io.Reader, path string) ([]Event, *TornTail, error) {
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
			return nil, nil, &ParseError{Path: path, Line: lineNo,
				Msg: fmt.Sprintf("line longer than %d bytes", maxLineLen)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if path != "" {
				return nil, nil, fmt.Errorf("timeline: read %s: %w", path, err)
			}
			return nil, nil, fmt.Errorf("timeline: read: %w", err)
		}
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return events, nil, nil
			}
			torn, msg := tornTail(line, intern)
			if msg != "" {
				return nil, nil, &ParseError{Path: path, Line: lineNo,
					Msg: "last line has no trailing newline and is not the start of a record: " + msg}
			}
			torn.Path, torn.Line = path, lineNo
			if torn.Counted {
				events = append(events, torn.Event)
			}
			return events, torn, nil
		}
		ev, msg := parseLine(line[:len(line)-1], intern)
		if msg != "" {
			return nil, nil, &ParseError{Path: path, Line: lineNo, Msg: msg}
		}
		events = append(events, ev)
	}
}

// tornTail judges b, a last line without its newline: a whole event
// (counted), the start of one (dropped), or neither (a message saying why).
func tornTail(b []byte, intern map[string]string) (*TornTail, string) {
	if ev, msg := parseLine(b, intern); msg == "" {
		return &TornTail{Bytes: len(b), Counted: true, Event: ev}, ""
	}
	if msg := prefixProblem(b); msg != "" {
		return nil, msg
	}
	return &TornTail{Bytes: len(b)}, ""
}

// prefixProblem returns why b cannot be the start of a valid line (without
// its newline), or "".
func prefixProblem(b []byte) string {
	// A write cut short may end inside a multi-byte character.
	whole := b
	if i := lastRuneStart(b); i >= 0 && !utf8.FullRune(b[i:]) {
		whole = b[:i]
	}
	if msg := charProblem(whole); msg != "" {
		return msg
	}
	fields := bytes.Split(whole, []byte{' '})
	if len(fields) > 3 {
		return fmt.Sprintf("%d fields, want 3: \"unix_nanos node_id key\"", len(fields))
	}
	for i, f := range fields[:len(fields)-1] {
		if len(f) == 0 {
			if i == 0 {
				return "leading space"
			}
			return fmt.Sprintf("two spaces in a row after field %d", i)
		}
	}
	if len(fields) == 1 && len(whole) < len(b) {
		return fmt.Sprintf("bad time %q: want a positive decimal integer of unix nanoseconds", b)
	}
	// A time cut short is still canonical and in range: parseTime judges
	// it as well as a whole one.
	if _, msg := parseTime(fields[0]); msg != "" {
		return msg
	}
	for i := 1; i < len(fields); i++ {
		n := len(fields[i])
		if i == len(fields)-1 {
			n += len(b) - len(whole)
		}
		if n > MaxNameLen {
			field := "node id"
			if i == 2 {
				field = "key"
			}
			return fmt.Sprintf("%s is %d bytes, longer than %d", field, n, MaxNameLen)
		}
	}
	return ""
}

// lastRuneStart returns the index of the first byte of b's last
// character, looking back at most utf8.UTFMax bytes, or -1.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}

// parseLine parses one line without its newline. It returns a non-empty
// message when the line is malformed.
func parseLine(b []byte, intern map[string]string) (Event, string) {
	if len(b) == 0 {
		return Event{}, "empty line; want \"unix_nanos node_id key\""
	}
	// Reject stray bytes first so that a tab or CR is named as such rather
	// than reported as a missing field.
	if msg := charProblem(b); msg != "" {
		return Event{}, msg
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

// charProblem names the first byte of b that no line may hold (a control
// character, whitespace other than ' ', invalid UTF-8), or returns "".
func charProblem(b []byte) string {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == 0x7f {
				return runeProblem(rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
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
// the order of paths). Errors name the file and line. A file may end in a
// torn line (see TornTail): ParseFilesTorn also returns those.
func ParseFiles(paths ...string) ([]Event, error) {
	evs, _, err := ParseFilesTorn(paths...)
	return evs, err
}

// ParseFilesTorn is ParseFiles that also returns the torn last line of
// each file that ends in one, in the order of paths.
func ParseFilesTorn(paths ...string) ([]Event, []TornTail, error) {
	var (
		all  []Event
		torn []TornTail
	)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, nil, fmt.Errorf("timeline: %w", err)
		}
		evs, t, err := parse(f, p)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		all = append(all, evs...)
		if t != nil {
			torn = append(torn, *t)
		}
	}
	slices.SortFunc(all, compareEvents)
	return all, torn, nil
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
