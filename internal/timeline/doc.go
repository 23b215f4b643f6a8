// Package timeline records admitted events and checks them against a
// key's ceiling (DESIGN.md section 8).
//
// Every test or benchmark that runs load gives each process a Writer; each
// admitted event becomes one line. A checker merges the files of all
// processes with ParseFiles and calls Check per key.
//
// # File format
//
// A timeline is UTF-8 text with one event per line:
//
//	unix_nanos node_id key\n
//
// unix_nanos is a positive int64 in canonical decimal (digits only, no
// sign, no leading zero); node_id and key are non-empty, at most
// MaxNameLen bytes, and contain no whitespace (unicode.IsSpace) or control
// characters (unicode.IsControl); fields are separated by exactly one
// space. Every line, the last included, ends with '\n'. Lines need not be
// in time order. Parse accepts exactly what WriteEvents and Writer write,
// so a file that parses re-serialises byte for byte; anything else (an
// empty line, "\r\n", a tab, a missing or extra field) is a *ParseError
// naming the line. The one exception is the end of a file: a last line
// with no newline that is the start of a valid line is the torn record of
// a writer killed while recording (TornTail, below); ParseTorn and
// ParseFilesTorn report it.
//
// # Durability
//
// Writer.Record issues one write(2) of one whole line on an O_APPEND file
// descriptor and keeps no buffer, so when Record returns the event is in
// the page cache: a SIGKILLed process loses nothing it recorded. Writer
// does not fsync.
//
// A line is not written atomically, though: Linux copies a write into the
// page cache a page at a time and checks for a fatal signal between pages
// (generic_perform_write), so a process SIGKILLed in the middle of a
// Record whose line crosses a page boundary leaves the start of that line,
// without its newline, at the end of its file. That Record never returned:
// the event was admitted but never acknowledged. Parse accepts such a torn
// last line and counts it when it still holds a whole event (over-counting
// is the safe side of a ceiling check; the key may then be cut short),
// drops it otherwise, and ParseTorn/ParseFilesTorn report it so that a
// checker can say so. NewWriter repairs a torn last line before appending
// (a process restarted with the same file): it completes a whole event
// with its newline and cuts an incomplete one off, so the file parses to
// the same events as before.
//
// # The bound
//
// For a limit of rate R (events/s) and burst B, the ceiling is that every
// closed window [t, t+W] (an event at exactly t+W is inside) holds at most
//
//	Bound(W) = R*W + B + R*Delta
//
// of the key's events, across all nodes, where Delta allows for the delay
// between a grant and its use. Check reports, per window length W, the
// largest count over all windows (a window holding the most events can be
// slid right until it starts at an event, so an O(n) two-pointer sweep
// over the sorted times finds it; events with identical timestamps all
// count) and flags it Over when MaxCount > Bound(W), with a relative
// tolerance of 1e-9 for float rounding.
//
// Windows are closed because that makes the ceiling exact: a perfectly
// paced sequence (B events at t0, then one every 1/R) holds B + floor(R*W)
// events in [t0, t0+W], which with Delta = 0 is floor(Bound) at every
// window length W, whether R*W is whole (the count meets the bound
// exactly) or fractional. So the paced sequence is never flagged, and a
// single surplus event in the burst's window [t0, t0+W] is flagged at
// every W. (Half-open windows [t, t+W) would stop one event short of the
// bound when R*W is whole and let such a surplus through.) Only the
// ceiling is checked, not conformance to the limiter: with B > 1 a surplus
// event in the steady part of a paced sequence breaks no ceiling and is
// not flagged.
//
// AchievedRate is the number of events in [Spec.From, Spec.To) over the
// interval's length, or, with both zero, (n-1)/(Last-First): the rate
// between the first and last event, 0 with fewer than two events. Turning
// coordination off (each of N processes pacing alone at R) shows up as
// windows over their bound and an AchievedRate near N*R.
//
// # Example
//
//	w, err := timeline.NewWriter(filepath.Join(dir, "n1.timeline"), "n1")
//	if err != nil { ... }
//	defer w.Close()
//	// after each admitted event:
//	if err := w.Record("acme", time.Now()); err != nil { ... }
//
//	// in the checker:
//	events, err := timeline.ParseFiles(paths...)
//	if err != nil { ... }
//	rep := timeline.Check(events, "acme", timeline.Spec{
//		Limit:   timeline.Limit{Rate: 20, Burst: 5},
//		Windows: []time.Duration{500 * time.Millisecond, time.Second, 5 * time.Second},
//		Delta:   time.Millisecond,
//	})
//	if !rep.OK() {
//		t.Errorf("ceiling violated:\n%s", rep)
//	}
package timeline
