package raftpace

import (
	"strconv"
	"strings"
	"time"
)

// Reservation is a grant of events: they may go at At, and must go no
// later than UseBy. Both are readings of this host's clock (with monotonic
// time). A caller that cannot use them by UseBy must drop them and reserve
// again: using them later would widen the ceiling's delta term.
type Reservation struct {
	At    time.Time
	UseBy time.Time
}

// Delay is how long to wait from now until the events may go.
func (r Reservation) Delay() time.Duration { return max(0, time.Until(r.At)) }

// Slot is a held concurrency slot on one or more keys (taken together, all
// or nothing). Deadline is when the slot is reclaimed however its holder
// fares: the holder must be done with the guarded work by then (bound it
// with a context deadline). Give it back with ReleaseSlot on the node or
// client that granted it.
type Slot struct {
	ID       string
	Keys     []string
	Deadline time.Time
}

// Want is one key of a reservation over several keys (ReserveAll): Count
// events of Key.
type Want struct {
	Key   string
	Count int
}

// MaxWants is the most keys one reservation may name.
const MaxWants = 16

// KeysOf names the keys of wants in messages: "a" or "a", "b".
func KeysOf(wants []Want) string {
	q := make([]string, len(wants))
	for i, w := range wants {
		q[i] = strconv.Quote(w.Key)
	}
	return strings.Join(q, ", ")
}

// Remaining is what a key's limit has left, as its leader counts it when
// asked (exact there; it may change the moment after).
type Remaining struct {
	Key string
	// Tokens is how many events the rate would grant at once fleet-wide
	// (at most Burst), as x/time/rate's Tokens: 0 while a queue waits.
	Tokens int
	Burst  int
	// The quota, when the limit has one (Quota 0 otherwise): Left of Quota
	// per Per remain in the window [WindowStart, Reset), Used are granted
	// (slots leased to members and not yet used count as granted).
	Quota       int64
	Per         string
	Used, Left  int64
	WindowStart time.Time
	Reset       time.Time
}
