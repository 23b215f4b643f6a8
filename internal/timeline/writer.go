package timeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// Writer appends events to a timeline file. It is safe for concurrent use.
//
// Each Record is one write(2) of one whole line on a file descriptor
// opened with O_APPEND, with no user-space buffering: once Record returns
// the event is in the kernel's page cache, so a process that is SIGKILLed
// loses nothing it recorded (a machine that loses power may; Writer does
// not fsync). A Record in progress when the process is killed may leave a
// torn last line (see TornTail), which Parse accepts and NewWriter repairs. On a local file system several processes may append to the
// same file without interleaving lines, but one file per process, merged
// with ParseFiles, is simpler and is what the tests do.
type Writer struct {
	path   string
	prefix []byte // " nodeID " written between the time and the key

	mu     sync.Mutex // serialises Record and Close
	f      *os.File
	closed bool
	broken error // set when a write failed part way; every later Record returns it

	repaired *TornTail // what NewWriter repaired; nil if nothing
}

// NewWriter opens path for appending, creating it (mode 0644) if needed,
// and returns a Writer that records events admitted by nodeID. It fails if
// nodeID is not a valid name (see ErrInvalidName).
//
// A file that ends in a torn line (a writer killed while recording, see
// TornTail) is repaired first, so that appending cannot glue the next
// event onto it, and so that Parse returns the same events as before: a
// torn line holding a whole event gets its newline; an incomplete one is
// cut off (the file is truncated to just after its last newline).
// Repaired reports what was done. The repair assumes that no other process
// is appending to the file meanwhile; a process restarted with its own
// file, as the agent is, is the case it is for. A file whose last line is
// not even the start of a record is not appended to (an error wrapping
// ErrSyntax).
func NewWriter(path, nodeID string) (*Writer, error) {
	if err := checkName("node id", nodeID); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	repaired, err := repairTail(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	prefix := make([]byte, 0, len(nodeID)+2)
	prefix = append(prefix, ' ')
	prefix = append(prefix, nodeID...)
	prefix = append(prefix, ' ')
	return &Writer{path: path, prefix: prefix, f: f, repaired: repaired}, nil
}

// repairTail makes f end with a newline (or be empty), as NewWriter says,
// and returns the torn line it found, or nil.
func repairTail(f *os.File, path string) (*TornTail, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	size := fi.Size()
	if size == 0 {
		return nil, nil
	}
	tail := make([]byte, min(size, maxLineLen))
	if _, err := f.ReadAt(tail, size-int64(len(tail))); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	if tail[len(tail)-1] == '\n' {
		return nil, nil
	}
	i := bytes.LastIndexByte(tail, '\n')
	if i < 0 && int64(len(tail)) < size {
		return nil, fmt.Errorf("%w: %s ends in a line longer than %d bytes; refusing to append", ErrSyntax, path, maxLineLen)
	}
	frag := tail[i+1:]
	torn, msg := tornTail(frag, map[string]string{})
	if msg != "" {
		return nil, fmt.Errorf("%w: %s ends in a line with no newline that is not the start of a record (%s); refusing to append",
			ErrSyntax, path, msg)
	}
	torn.Path = path
	if torn.Counted {
		// O_APPEND: the newline lands at the end, completing the line.
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return nil, fmt.Errorf("timeline: completing the torn last line of %s: %w", path, err)
		}
		return torn, nil
	}
	if err := f.Truncate(size - int64(len(frag))); err != nil {
		return nil, fmt.Errorf("timeline: cutting off the torn last line of %s: %w", path, err)
	}
	return torn, nil
}

// Repaired returns the torn last line NewWriter found and repaired (see
// NewWriter), or nil if the file was empty or ended with a newline. Its
// Line is 0: NewWriter does not read the whole file.
func (w *Writer) Repaired() *TornTail { return w.repaired }

// Path returns the file the Writer appends to.
func (w *Writer) Path() string { return w.path }

// Record appends the line "at.UnixNano() nodeID key" and returns once it
// is in the page cache. It fails with an error wrapping ErrInvalidName for
// a bad key, ErrInvalidTime for a time not after the Unix epoch or beyond
// 2262, and ErrClosed after Close; a rejected event writes nothing. If a
// write fails part way (disk full), that and every later Record fail.
func (w *Writer) Record(key string, at time.Time) error {
	if err := checkName("key", key); err != nil {
		return err
	}
	ns := at.UnixNano()
	if ns <= 0 || !time.Unix(0, ns).Equal(at) {
		return fmt.Errorf("%w: %s is not after 1970 and before 2262 (int64 unix nanoseconds)",
			ErrInvalidTime, at.Format(time.RFC3339Nano))
	}

	// A line is at most maxLineLen bytes; short ones use the stack array.
	var arr [128]byte
	b := strconv.AppendInt(arr[:0], ns, 10)
	b = append(b, w.prefix...)
	b = append(b, key...)
	b = append(b, '\n')

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("timeline: record %q: %w", key, ErrClosed)
	}
	if w.broken != nil {
		return w.broken
	}
	// For a regular file os.File.Write is one write(2) of the whole line;
	// it only writes short when the kernel refuses part of it (disk full,
	// file size limit), and then reports an error.
	n, err := w.f.Write(b)
	if err != nil {
		err = fmt.Errorf("timeline: record %q: %w", key, err)
		if n > 0 {
			// The file now ends in a partial line, which Parse reports as
			// a TornTail (and a new Writer repairs). Appending more would
			// glue the next event onto it.
			w.broken = fmt.Errorf("timeline: %s ends in a partial line after an earlier failed write: %w", w.path, err)
		}
		return err
	}
	return nil
}

// Close closes the file. It is idempotent: later calls return nil. A Record
// in progress finishes first; later ones return ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("timeline: close %s: %w", w.path, err)
	}
	return nil
}
