package timeline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParse_Valid(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []Event
	}{
		{"empty input", "", nil},
		{"one line", "1700000000000000000 n1 k\n", []Event{{t0, "n1", "k"}}},
		{"file order kept, unsorted", "3 n2 b\n1 n1 a\n2 n1 a\n",
			[]Event{{3, "n2", "b"}, {1, "n1", "a"}, {2, "n1", "a"}}},
		{"largest time", "9223372036854775807 n k\n", []Event{{9223372036854775807, "n", "k"}}},
		{"punctuation and unicode names", "5 node-1.eu:7946 provider:acme/cred:42\n6 nœud clé€\n",
			[]Event{{5, "node-1.eu:7946", "provider:acme/cred:42"}, {6, "nœud", "clé€"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.input))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParse_Errors(t *testing.T) {
	good := "1 n k\n"
	long := strings.Repeat("x", MaxNameLen+1)
	tests := []struct {
		name    string
		input   string
		line    int
		wantMsg string
	}{
		{"bad integer", good + "12x n k\n", 2, `bad time "12x"`},
		{"float time", "1.5 n k\n", 1, `bad time "1.5"`},
		{"plus sign", "+1 n k\n", 1, `bad time "+1"`},
		{"leading zero", "01 n k\n", 1, `bad time "01": leading zero`},
		{"out of range", "9223372036854775808 n k\n", 1, "out of int64 range"},
		{"negative time", good + good + "-5 n k\n", 3, "time -5 is not positive"},
		{"zero time", "0 n k\n", 1, "time 0 is not positive"},
		{"missing key", good + "1 n\n", 2, "missing key"},
		{"missing node and key", "1\n", 1, "missing node id and key"},
		{"extra field", "1 n k extra\n", 1, "4 fields, want 3"},
		{"trailing space", "1 n k \n", 1, "trailing space"},
		{"double space", "1  n k\n", 1, "two spaces in a row after field 1"},
		{"leading space", " 1 n k\n", 1, "leading space"},
		{"only a space", " \n", 1, "leading space"},
		{"empty line", good + "\n" + good, 2, "empty line"},
		{"control char in key", "1 n k\x01\n", 1, "control character U+0001 at byte 5"},
		{"DEL in node", "1 n\x7f k\n", 1, "control character U+007F"},
		{"NUL in time", "1\x00 n k\n", 1, "control character U+0000"},
		{"C1 control", "1 n k\u0085x\n", 1, "U+0085"},
		{"tab separator", "1\tn\tk\n", 1, "whitespace U+0009 at byte 1"},
		{"CRLF line end", good + "2 n k\r\n", 2, "whitespace U+000D"},
		{"no-break space in key", "1 n a\u00a0b\n", 1, "whitespace U+00A0"},
		{"invalid UTF-8", "1 n k\xff\n", 1, "invalid UTF-8 at byte 5"},
		// A last line without a newline is accepted only when it is the
		// start of a valid line (TestParse_TornTail).
		{"garbage last line", good + "hello world", 2, `no trailing newline and is not the start of a record: bad time "hello"`},
		{"control char in last line", good + "2 n\x01", 2, "not the start of a record: contains control character U+0001"},
		{"extra field in last line", good + "2 n k x", 2, "not the start of a record: 4 fields, want 3"},
		{"trailing space after key in last line", good + "2 n k ", 2, "not the start of a record: 4 fields"},
		{"double space in last line", good + "2  n", 2, "not the start of a record: two spaces in a row after field 1"},
		{"leading space in last line", good + " 2 n", 2, "not the start of a record: leading space"},
		{"leading zero in last line", good + "02", 2, "not the start of a record: bad time \"02\": leading zero"},
		{"zero time in last line", good + "0 n", 2, "not the start of a record: time 0 is not positive"},
		{"time out of range in last line", good + "9223372036854775808", 2, "not the start of a record: bad time \"9223372036854775808\": out of int64 range"},
		{"invalid UTF-8 in last line", good + "2 n \xffk", 2, "not the start of a record: invalid UTF-8 at byte 4"},
		{"cut character in time", good + "2\xc3", 2, "not the start of a record: bad time"},
		{"CR at the end of the last line", good + "2 n k\r", 2, "not the start of a record: contains whitespace U+000D"},
		{"key too long in last line", good + "2 n " + long, 2, "not the start of a record: key is 4097 bytes"},
		{"missing newline in the middle", "1 n k2 n k\n", 1, "5 fields, want 3"},
		{"key too long", "1 n " + long + "\n", 1, "key is 4097 bytes"},
		{"line too long", "1 n " + strings.Repeat("y", 200_000) + "\n", 1, "line longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := Parse(strings.NewReader(tt.input))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", tt.input, evs)
			}
			if evs != nil {
				t.Errorf("events %v returned with error", evs)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v (%T) is not a *ParseError wrapping ErrSyntax", err, err)
			}
			if pe.Line != tt.line {
				t.Errorf("line %d, want %d (%v)", pe.Line, tt.line, err)
			}
			wantPrefix := fmt.Sprintf("timeline: line %d: ", tt.line)
			if msg := err.Error(); !strings.HasPrefix(msg, wantPrefix) || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q, want prefix %q containing %q", msg, wantPrefix, tt.wantMsg)
			}
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestParse_ReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Parse(failingReader{boom})
	var pe *ParseError
	if !errors.Is(err, boom) || errors.As(err, &pe) {
		t.Errorf("got %v, want the reader's error, not a ParseError", err)
	}
}

func TestParse_TornTail(t *testing.T) {
	good := "1 n k\n"
	tests := []struct {
		name  string
		input string
		want  []Event
		torn  TornTail
	}{
		{"cut in the time", good + "17", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 2}},
		{"cut after the time", good + "17 ", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 3}},
		{"cut in the node id", good + "17 no", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 5}},
		{"cut after the node id", good + "17 node ", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 8}},
		{"cut inside a character of the node id", good + "17 n\xc5", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 5}},
		{"cut inside a character of the key", good + "17 n cl\xe2\x82", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 9}},
		{"largest time cut short", good + "922337203685477580", []Event{{1, "n", "k"}}, TornTail{Line: 2, Bytes: 18}},
		{"only line cut", "17 n", nil, TornTail{Line: 1, Bytes: 4}},
		{"whole event without newline", good + "17 n key", []Event{{1, "n", "k"}, {17, "n", "key"}},
			TornTail{Line: 2, Bytes: 8, Counted: true, Event: Event{17, "n", "key"}}},
		{"only line whole without newline", "17 n k", []Event{{17, "n", "k"}},
			TornTail{Line: 1, Bytes: 6, Counted: true, Event: Event{17, "n", "k"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, torn, err := ParseTorn(strings.NewReader(tt.input))
			if err != nil {
				t.Fatalf("ParseTorn: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events %v, want %v", got, tt.want)
			}
			if torn == nil || *torn != tt.torn {
				t.Fatalf("torn %+v, want %+v", torn, tt.torn)
			}
			// Parse agrees, without the report.
			if evs, err := Parse(strings.NewReader(tt.input)); err != nil || !slices.Equal(evs, tt.want) {
				t.Errorf("Parse = %v, %v", evs, err)
			}
			s := torn.String()
			if want := fmt.Sprintf("line %d: torn last line (%d bytes", tt.torn.Line, tt.torn.Bytes); !strings.Contains(s, want) {
				t.Errorf("String() = %q, want it to contain %q", s, want)
			}
			if tt.torn.Counted != strings.Contains(s, "counted as the event") {
				t.Errorf("String() = %q does not say whether it was counted", s)
			}
		})
	}
	// A file that ends with a newline has no torn tail.
	if _, torn, err := ParseTorn(strings.NewReader(good)); err != nil || torn != nil {
		t.Errorf("ParseTorn(%q) = %v, %v", good, torn, err)
	}
}

func TestParseFilesTorn(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.timeline", "30 a k\n10 a k\n20 a")
	b := writeFile(t, dir, "b.timeline", "15 b k\n")
	c := writeFile(t, dir, "c.timeline", "12 c k")
	evs, torn, err := ParseFilesTorn(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Event{{10, "a", "k"}, {12, "c", "k"}, {15, "b", "k"}, {30, "a", "k"}}; !slices.Equal(evs, want) {
		t.Errorf("events %v, want %v", evs, want)
	}
	want := []TornTail{{Path: a, Line: 3, Bytes: 4}, {Path: c, Line: 1, Bytes: 6, Counted: true, Event: Event{12, "c", "k"}}}
	if !slices.Equal(torn, want) {
		t.Errorf("torn %+v, want %+v", torn, want)
	}
	if s := torn[0].String(); !strings.HasPrefix(s, "timeline: "+a+": line 3: torn last line (4 bytes") || !strings.Contains(s, "dropped") {
		t.Errorf("String() = %q", s)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseFiles_MergesAndSorts(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.timeline", "30 a k\n10 a k\n20 a x\n")
	b := writeFile(t, dir, "b.timeline", "15 b k\n10 b k\n40 b k\n")
	empty := writeFile(t, dir, "empty.timeline", "")
	want := []Event{{10, "a", "k"}, {10, "b", "k"}, {15, "b", "k"}, {20, "a", "x"}, {30, "a", "k"}, {40, "b", "k"}}
	for _, order := range [][]string{{a, b, empty}, {empty, b, a}} {
		got, err := ParseFiles(order...)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ParseFiles(%v) = %v, want %v", order, got, want)
		}
	}
	if got, err := ParseFiles(); err != nil || len(got) != 0 {
		t.Errorf("ParseFiles() = %v, %v", got, err)
	}

	bad := writeFile(t, dir, "bad.timeline", "1 n k\n2 n k\n3 n\n")
	_, err := ParseFiles(a, bad)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Path != bad || pe.Line != 3 ||
		err.Error() != "timeline: "+bad+": line 3: missing key; want \"unix_nanos node_id key\"" {
		t.Errorf("got %v", err)
	}
	_, err = ParseFiles(a, filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}

func TestWriteEvents_RoundTrip(t *testing.T) {
	evs := []Event{{3, "n2", "b"}, {1, "n1", "a/é"}, {t0, "n1", "a"}}
	var buf bytes.Buffer
	if err := WriteEvents(&buf, evs); err != nil {
		t.Fatal(err)
	}
	if want := "3 n2 b\n1 n1 a/é\n1700000000000000000 n1 a\n"; buf.String() != want {
		t.Errorf("wrote %q, want %q", buf.String(), want)
	}
	got, err := Parse(&buf)
	if err != nil || !slices.Equal(got, evs) {
		t.Errorf("Parse = %v, %v; want %v", got, err, evs)
	}
	if s := evs[0].String(); s != "3 n2 b" {
		t.Errorf("String() = %q", s)
	}

	for _, bad := range []Event{{0, "n", "k"}, {-1, "n", "k"}, {1, "", "k"}, {1, "n", "a b"}, {1, "n\n", "k"}} {
		buf.Reset()
		err := WriteEvents(&buf, []Event{{1, "n", "k"}, bad})
		if err == nil || buf.Len() != 0 || !strings.Contains(err.Error(), "event 1") {
			t.Errorf("WriteEvents(%+v): err %v, wrote %q", bad, err, buf.String())
		}
	}
}

func TestWriter_ConcurrentRecord(t *testing.T) {
	const goroutines, perG = 16, 1000
	path := filepath.Join(t.TempDir(), "n1.timeline")
	w, err := NewWriter(path, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			key := fmt.Sprintf("key-%d", g)
			for i := range perG {
				at := time.Unix(0, t0+int64(g)*1_000_000+int64(i))
				if err := w.Record(key, at); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	evs, err := ParseFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != goroutines*perG {
		t.Fatalf("parsed %d events, want %d", len(evs), goroutines*perG)
	}
	seen := make(map[Event]bool, len(evs))
	for _, e := range evs {
		seen[e] = true
	}
	for g := range goroutines {
		for i := range perG {
			e := Event{At: t0 + int64(g)*1_000_000 + int64(i), Node: "n1", Key: fmt.Sprintf("key-%d", g)}
			if !seen[e] {
				t.Fatalf("missing %v", e)
			}
		}
	}
}

func TestWriter_Errors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n1.timeline")
	w, err := NewWriter(path, "n1")
	if err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"a b", "", "k\n", "k\t", "a\x00", "a\u2028b", "\xff"} {
		err := w.Record(key, time.Unix(0, t0))
		var ne *NameError
		if !errors.Is(err, ErrInvalidName) || !errors.As(err, &ne) || ne.Field != "key" {
			t.Errorf("Record(%q): got %v, want a key NameError", key, err)
		}
	}
	if err := w.Record(strings.Repeat("k", MaxNameLen+1), time.Unix(0, t0)); !errors.Is(err, ErrInvalidName) {
		t.Errorf("long key: got %v", err)
	}
	for _, at := range []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 0), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if err := w.Record("k", at); !errors.Is(err, ErrInvalidTime) {
			t.Errorf("Record at %v: got %v, want ErrInvalidTime", at, err)
		}
	}
	if err := w.Record("k", time.Unix(0, t0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Record("k", time.Unix(0, t0+1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close: got %v, want ErrClosed", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "1700000000000000000 n1 k\n" {
		t.Errorf("file holds %q; rejected records must write nothing", b)
	}

	// Bad node ids.
	for _, node := range []string{"", "n 1", "n\x1b", "n\r"} {
		_, err := NewWriter(filepath.Join(dir, "x"), node)
		var ne *NameError
		if !errors.As(err, &ne) || ne.Field != "node id" || !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewWriter node %q: got %v", node, err)
		}
	}
	if _, err := NewWriter(filepath.Join(dir, "no", "such", "dir"), "n1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewWriter in missing dir: got %v", err)
	}
	// A file whose last line is not even the start of a record is not
	// appended to, and is left as it is.
	for _, content := range []string{"1 n k\nxx yy", "1 n k\n2 n k x", "1 n k\n" + strings.Repeat("1", maxLineLen+10)} {
		p := writeFile(t, dir, "garbage.timeline", content)
		if _, err := NewWriter(p, "n1"); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "refusing to append") {
			t.Errorf("NewWriter on a file ending %.20q: got %v", content[6:], err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("NewWriter changed a file it refused")
		}
	}
}

// An agent restarted after a SIGKILL appends to the file its killed
// predecessor left: NewWriter repairs a torn last line so that the file
// parses to the same events before and after, plus the new ones.
func TestWriter_RepairsTornTail(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		after   string // the file after NewWriter
		torn    *TornTail
	}{
		{"empty", "", "", nil},
		{"clean", "1 n k\n", "1 n k\n", nil},
		{"incomplete record cut off", "1 n k\n2 n", "1 n k\n", &TornTail{Bytes: 3}},
		{"cut inside a character", "1 n k\n2 n cl\xc3", "1 n k\n", &TornTail{Bytes: 7}},
		{"only an incomplete record", "2 n", "", &TornTail{Bytes: 3}},
		{"whole record completed", "1 n k\n2 n key", "1 n k\n2 n key\n", &TornTail{Bytes: 7, Counted: true, Event: Event{2, "n", "key"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(tt.name, " ", "-"), tt.content)
			before, _ := ParseFiles(p)
			w, err := NewWriter(p, "n2")
			if err != nil {
				t.Fatal(err)
			}
			if tt.torn != nil {
				tt.torn.Path = p
			}
			if got := w.Repaired(); (got == nil) != (tt.torn == nil) || got != nil && *got != *tt.torn {
				t.Errorf("Repaired() = %+v, want %+v", got, tt.torn)
			}
			if b, _ := os.ReadFile(p); string(b) != tt.after {
				t.Errorf("after NewWriter the file holds %q, want %q", b, tt.after)
			}
			if err := w.Record("k", time.Unix(0, t0)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			evs, torn, err := ParseFilesTorn(p)
			if err != nil || torn != nil {
				t.Fatalf("after a restart: %v, torn %v", err, torn)
			}
			want := append(slices.Clone(before), Event{t0, "n2", "k"})
			slices.SortFunc(want, compareEvents)
			if !slices.Equal(evs, want) {
				t.Errorf("events %v, want %v", evs, want)
			}
		})
	}
}

func TestWriter_AppendsToExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t")
	for i, node := range []string{"n1", "n2"} {
		w, err := NewWriter(path, node)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Record("k", time.Unix(0, t0+int64(i))); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := ParseFiles(path)
	if want := []Event{{t0, "n1", "k"}, {t0 + 1, "n2", "k"}}; err != nil || !slices.Equal(evs, want) {
		t.Errorf("got %v, %v; want %v", evs, err, want)
	}
}

// The helper process records events as fast as it can, reporting on stdout
// how many Record calls have returned; the test SIGKILLs it mid-stream.
// Its keys are long and of varying length, so that most lines cross a page
// boundary, where the kernel may end a write cut short by the SIGKILL
// (see TornTail): the test then sees a torn last line.
const helperEnv = "TIMELINE_TEST_HELPER_PATH"

// helperNode is the helper's node id: long, with the long keys of
// helperEvent, so that every line (4-8 KiB) crosses a page boundary.
var helperNode = "victim-" + strings.Repeat("v", 3000)

// helperEvent is the i-th event (from 1) the helper records.
func helperEvent(i int64) Event {
	return Event{At: t0 + i, Node: helperNode, Key: "k" + strings.Repeat("x", 1000+int(i*7919%3000))}
}

func TestWriter_HelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process for TestWriter_SurvivesSIGKILL")
	}
	w, err := NewWriter(path, helperNode)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for i := int64(1); ; i++ {
		e := helperEvent(i)
		if err := w.Record(e.Key, time.Unix(0, e.At)); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if i%100 == 0 {
			fmt.Println(i) // i events are recorded
		}
	}
}

func TestWriter_SurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	path := filepath.Join(t.TempDir(), "victim.timeline")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriter_HelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	// Wait until the helper has recorded at least 1000 events, then kill
	// it while it is still recording.
	sc := bufio.NewScanner(out)
	var acked int64
	for acked < 1000 && sc.Scan() {
		if _, err := fmt.Sscan(sc.Text(), &acked); err != nil {
			t.Fatalf("helper said %q", sc.Text())
		}
	}
	if acked < 1000 {
		t.Fatalf("helper stopped after %d events: %v", acked, sc.Err())
	}
	// Kill it at a random moment of its stream, not just as it reports:
	// keep reading its reports (so it never blocks on them) a little.
	go io.Copy(io.Discard, out)
	time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Millisecond))))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	cmd.Wait()

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	evs, torn, err := ParseFilesTorn(path)
	if err != nil {
		t.Fatalf("timeline of a killed writer does not parse: %v", err)
	}
	if int64(len(evs)) < acked {
		t.Fatalf("parsed %d events, but %d Record calls had returned", len(evs), acked)
	}
	// A torn last line is reported exactly when the file does not end
	// with a newline, and is the start of the next event's line.
	endsClean := raw[len(raw)-1] == '\n'
	if endsClean != (len(torn) == 0) {
		t.Fatalf("file ends clean: %v; torn tails reported: %+v", endsClean, torn)
	}
	whole := evs
	if len(torn) == 1 {
		tt := torn[0]
		frag := raw[bytes.LastIndexByte(raw, '\n')+1:]
		next := helperEvent(int64(bytes.Count(raw, []byte{'\n'})) + 1)
		if tt.Bytes != len(frag) || !strings.HasPrefix(next.String(), string(frag)) {
			t.Fatalf("torn tail %+v: %d bytes %.40q... are not the start of the next line", tt, len(frag), frag)
		}
		if tt.Counted {
			// Cut just before its newline, or inside the key: counted,
			// under the key as far as it was written.
			last := evs[len(evs)-1]
			if last != tt.Event || last.At != next.At || last.Node != next.Node || !strings.HasPrefix(next.Key, last.Key) {
				t.Fatalf("counted torn event %v, the next event was %v", last, next)
			}
			whole = evs[:len(evs)-1]
		}
		t.Logf("torn last line: %d bytes of the %d-byte line, counted %v", tt.Bytes, len(next.String())+1, tt.Counted)
	}
	for i, e := range whole {
		if want := helperEvent(int64(i) + 1); e != want {
			t.Fatalf("event %d is %v, want %v", i, e, want)
		}
	}
	t.Logf("killed after %d acknowledged records; %d whole lines on disk, torn tail: %v", acked, len(whole), len(torn) == 1)

	// Restarted on the same file, a writer repairs the tail and appends;
	// the file then parses to the same events plus the new one.
	w, err := NewWriter(path, helperNode)
	if err != nil {
		t.Fatalf("NewWriter after SIGKILL: %v", err)
	}
	if r := w.Repaired(); (r != nil) != (len(torn) == 1) || r != nil && (r.Bytes != torn[0].Bytes || r.Counted != torn[0].Counted) {
		t.Errorf("Repaired() = %+v, the parse found %+v", r, torn)
	}
	restart := Event{At: t0 + 1_000_000_000, Node: helperNode, Key: "after-restart"}
	if err := w.Record(restart.Key, time.Unix(0, restart.At)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	again, torn2, err := ParseFilesTorn(path)
	if err != nil || len(torn2) != 0 {
		t.Fatalf("after the restart: %v, torn %+v", err, torn2)
	}
	if want := append(slices.Clone(evs), restart); !slices.Equal(again, want) {
		t.Fatalf("after the restart %d events, want the %d before and the new one", len(again), len(evs))
	}
}
