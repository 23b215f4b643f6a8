package tally

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Keys counts outcomes per key in a bounded map that reservations read
// without a lock.
type Keys struct {
	max   int      // keys counted one by one
	other string   // the key further keys are counted under
	m     sync.Map // string -> *Counter
	size  atomic.Int64
	mu    sync.Mutex // serialises inserts (so size stays exact)
}

// Counter is one key's outcome counters; its owner names what each counts.
type Counter struct {
	Granted, Refused, Paused, Unknown, Failed atomic.Uint64
	DryRun, Quota                             atomic.Uint64
	Events                                    atomic.Uint64
	Acquired, ConcRefused, SlotUnknown        atomic.Uint64
	SlotFailed                                atomic.Uint64
}

// NewKeys returns a table that counts up to max keys one by one and the
// outcomes of any further key under other.
func NewKeys(max int, other string) *Keys {
	return &Keys{max: max, other: other}
}

// Get returns key's counter (other's, once max keys are counted).
func (k *Keys) Get(key string) *Counter {
	if c, ok := k.m.Load(key); ok {
		return c.(*Counter)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.m.Load(key); ok {
		return c.(*Counter)
	}
	if k.size.Load() >= int64(k.max) && key != k.other {
		return k.getLocked(k.other)
	}
	return k.getLocked(key)
}

func (k *Keys) getLocked(key string) *Counter {
	if c, ok := k.m.Load(key); ok {
		return c.(*Counter)
	}
	c := &Counter{}
	k.m.Store(key, c)
	k.size.Add(1)
	return c
}

// Each calls f with every counted key and its counter, in key order.
func (k *Keys) Each(f func(key string, c *Counter)) {
	type entry struct {
		key string
		c   *Counter
	}
	var all []entry
	k.m.Range(func(key, v any) bool {
		all = append(all, entry{key.(string), v.(*Counter)})
		return true
	})
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	for _, e := range all {
		f(e.key, e.c)
	}
}
