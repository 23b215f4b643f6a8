package gate

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Deadlines maps keys to deadlines on the node's clock. It is copy on
// write: Reserve reads it on every reservation without a lock (and, while
// nothing is paused, reads only a nil pointer); writers, which are rare,
// serialise on mu. The zero value is empty and ready to use.
type Deadlines struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]int64]
}

// Get returns key's deadline, if it has one.
func (d *Deadlines) Get(key string) (int64, bool) {
	m := d.m.Load()
	if m == nil {
		return 0, false
	}
	end, ok := (*m)[key]
	return end, ok
}

// All returns a copy of every deadline.
func (d *Deadlines) All() map[string]int64 {
	if m := d.m.Load(); m != nil {
		return maps.Clone(*m)
	}
	return map[string]int64{}
}

// Update applies f to a copy of the map and publishes the copy (nil when
// it ends up empty, keeping the read cheap).
func (d *Deadlines) Update(f func(m map[string]int64)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := d.All()
	f(next)
	if len(next) == 0 {
		d.m.Store(nil)
		return
	}
	d.m.Store(&next)
}

// Extend moves key's deadline to end if that is later, and forgets the
// deadlines that passed before now.
func (d *Deadlines) Extend(key string, end, now int64) {
	d.Update(func(m map[string]int64) {
		maps.DeleteFunc(m, func(_ string, e int64) bool { return e <= now })
		m[key] = max(m[key], end)
	})
}
