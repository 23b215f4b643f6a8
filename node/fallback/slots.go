package fallback

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// AcquireSlots grants a slot on every key from this node's fraction of
// their caps, if the node is in fallback, has been for MaxSlotTTL (every
// slot the leader granted before this node's share lapsed has expired), and
// each key has room. The slot ends by the time fallback stops. ErrNotLeader:
// back in raft mode. ErrConcurrencyLimit: no room (yet); the caller waits.
func (fb *Fallback) AcquireSlots(id string, keys []string, ttl time.Duration) (raftpace.Slot, []string, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.d.Now()
	switch fb.advanceLocked(now) {
	case ModeRaft:
		return raftpace.Slot{}, nil, wire.ErrNotLeader
	case ModeStopped:
		return raftpace.Slot{}, nil, fmt.Errorf("node: acquire slots %q: %w", keys, raftpace.ErrStopped)
	}
	if from := fb.since + int64(fb.cfg.MaxSlotTTL); now < from {
		return raftpace.Slot{}, keys, fmt.Errorf("%w: in fallback, this node grants slots from its fraction of the caps only from %v after losing its leader (Config.MaxSlotTTL), %v from now",
			raftpace.ErrConcurrencyLimit, fb.cfg.MaxSlotTTL, time.Duration(from-now).Round(time.Millisecond))
	}
	f := fb.fraction()
	var full []string
	for _, key := range keys {
		c, ok := fb.d.State.Cap(key)
		if !ok {
			return raftpace.Slot{}, nil, fmt.Errorf("node: acquire slot %q: %w: no concurrency cap is set for it", key, raftpace.ErrUnknownKey)
		}
		room := int(math.Floor(f * float64(c)))
		inUse := 0
		for _, s := range fb.slots {
			if s.expires > now && slices.Contains(s.keys, key) {
				inUse++
			}
		}
		if inUse >= room {
			full = append(full, key)
		}
	}
	if len(full) > 0 {
		return raftpace.Slot{}, full, fmt.Errorf("%w: in fallback, this node's fraction %.3f of the caps of %q is in use", raftpace.ErrConcurrencyLimit, f, full)
	}
	end := min(now+int64(ttl), fb.promiseAt()+int64(fb.cfg.FallbackFor))
	if fb.cfg.Witnessed {
		end = min(now+int64(ttl), fb.licence.Load()) // what a fencing leader waits for
	}
	if end <= now {
		return raftpace.Slot{}, nil, fmt.Errorf("node: acquire slots %q: %w", keys, raftpace.ErrStopped)
	}
	if fb.slots == nil {
		fb.slots = make(map[string]localSlot)
	}
	for sid, s := range fb.slots {
		if s.expires <= now {
			delete(fb.slots, sid)
		}
	}
	fb.slots[id] = localSlot{keys: keys, expires: end}
	fb.slotEnd = max(fb.slotEnd, end)
	return raftpace.Slot{ID: id, Keys: keys, Deadline: fb.d.Epoch.Add(time.Duration(end))}, nil, nil
}

// ReleaseSlot gives back a fallback slot. slotEnd stays: the leader keeps
// this node's floor free until then, which only under-admits.
func (fb *Fallback) ReleaseSlot(id string) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	delete(fb.slots, id)
}

// LocalSlotsInUse counts the fallback slots held per key.
func (fb *Fallback) LocalSlotsInUse(now int64) map[string]int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	out := make(map[string]int)
	for _, s := range fb.slots {
		if s.expires > now {
			for _, k := range s.keys {
				out[k]++
			}
		}
	}
	return out
}
