package policy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/render"
	"github.com/raftpace/raftpace/fsm"
)

// Change is one key whose value in the file differs from the cluster's.
type Change struct {
	Key string
	// Cap: a concurrency cap (Max, WasMax); otherwise a limit (Limit, Was).
	Cap    bool
	Limit  fsm.Limit
	Was    fsm.Limit // zero when the cluster has no limit for Key
	Max    int
	WasMax int // 0 when the cluster has no cap for Key
}

// New reports whether the cluster has no value for the key yet.
func (c Change) New() bool {
	if c.Cap {
		return c.WasMax == 0
	}
	return c.Was == fsm.Limit{}
}

// Kind is "cap" or "limit".
func (c Change) Kind() string {
	if c.Cap {
		return "cap"
	}
	return "limit"
}

// String is the change as the operator reads it:
// "limit tenant:a: 5/s burst 5 (new)", "cap api: 4 -> 8",
// "limit b: 5/s burst 5 (dry run) -> 5/s burst 5".
func (c Change) String() string {
	limit := func(l fsm.Limit) string {
		s := fmt.Sprintf("%s/s burst %d", render.Rate(l.Rate), l.Burst)
		if l.Quota != 0 {
			s += " quota " + l.FormatQuota()
		}
		if l.DryRun {
			s += " (dry run)"
		}
		return s
	}
	switch {
	case c.Cap && c.New():
		return fmt.Sprintf("cap %s: %d (new)", c.Key, c.Max)
	case c.Cap:
		return fmt.Sprintf("cap %s: %d -> %d", c.Key, c.WasMax, c.Max)
	case c.New():
		return fmt.Sprintf("limit %s: %s (new)", c.Key, limit(c.Limit))
	}
	return fmt.Sprintf("limit %s: %s -> %s", c.Key, limit(c.Was), limit(c.Limit))
}

// Plan is what applying a file to a cluster would do.
type Plan struct {
	Changes   []Change // limits first, then caps, each sorted by key
	Unchanged int      // keys of the file the cluster already holds as written
	// Untouched counts the cluster's keys the file does not name: applying
	// never deletes, so they keep their values.
	Untouched int
}

// Summary ends a run: what it did (lead), then what it left alone.
func (p Plan) Summary(lead string) string {
	s := fmt.Sprintf("%s; %d already as in the file", lead, p.Unchanged)
	if p.Untouched > 0 {
		s += fmt.Sprintf("; %d not in the file left as they are", p.Untouched)
	}
	return s
}

// Diff compares a file with the cluster's limits and caps.
func Diff(f File, limits map[string]fsm.Limit, caps map[string]int) Plan {
	var p Plan
	for k, l := range f.Limits {
		want := l.Limit()
		if was, ok := limits[k]; ok && was == want {
			p.Unchanged++
		} else {
			p.Changes = append(p.Changes, Change{Key: k, Limit: want, Was: was})
		}
	}
	for k, m := range f.Caps {
		if was, ok := caps[k]; ok && was == m {
			p.Unchanged++
		} else {
			p.Changes = append(p.Changes, Change{Key: k, Cap: true, Max: m, WasMax: was})
		}
	}
	for k := range limits {
		if _, ok := f.Limits[k]; !ok {
			p.Untouched++
		}
	}
	for k := range caps {
		if _, ok := f.Caps[k]; !ok {
			p.Untouched++
		}
	}
	slices.SortFunc(p.Changes, func(a, b Change) int {
		if a.Cap != b.Cap {
			if a.Cap {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return p
}

// Setter sets one limit or cap on the cluster (the admin API's client).
type Setter interface {
	SetLimit(ctx context.Context, key string, lim fsm.Limit) error
	SetCap(ctx context.Context, key string, max int) error
}

// Apply makes the changes with inFlight requests at once, each given up
// after timeout, and returns each change's error (nil: set) in the order
// of changes. Every change is tried: one failing stops none of the others,
// so a run again after a failure only has the failed ones left to do.
func Apply(ctx context.Context, s Setter, changes []Change, inFlight int, timeout time.Duration) []error {
	errs := make([]error, len(changes))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(max(inFlight, 1), len(changes)) {
		wg.Go(func() {
			for i := range work {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				if ch := changes[i]; ch.Cap {
					errs[i] = s.SetCap(ctx, ch.Key, ch.Max)
				} else {
					errs[i] = s.SetLimit(ctx, ch.Key, ch.Limit)
				}
				cancel()
			}
		})
	}
	for i := range changes {
		work <- i
	}
	close(work)
	wg.Wait()
	return errs
}
