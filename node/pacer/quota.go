package pacer

import (
	"context"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// A key's quota (fsm.Limit.Quota per calendar window of Per) is kept like
// its horizon: the leader grants only under the count committed through
// raft for the current window (fsm.CommitQuotas), commits it ahead of use
// in batches, and a new leader, or a key read back into memory, starts its
// count at the committed one. A leader change may so lose the part of a
// batch the old leader had not granted; it never grants a slot of the
// window twice. Windows are read on this leader's wall clock (Wall), and
// every event of a grant is counted in the window of its slot: a slot past
// the window's end waits for the window to begin (it is not granted ahead
// of it), so no window ever counts another's events.

// quota is the leader's count of one key's current window.
type quota struct {
	per       fsm.Period
	window    int64     // the window's start, Unix seconds
	end       time.Time // the window's end, wall clock
	used      int64     // granted in the window (from the committed count at load)
	committed int64     // committed through raft, this generation
	need      int64     // the most a waiting request needs committed
}

// quotaBatch is how many events of the key one CommitQuotas entry commits
// ahead: its burst and what its rate grants over the leader's horizon
// look-ahead and a lease span, so a busy key's quota costs about one
// commit per look-ahead, as its horizon does.
func (p *Pacer) quotaBatch(ks *keyState) int64 {
	b := int64(ks.limit.Burst) + p.ahead/max(1, ks.params.Interval) + p.span/max(1, ks.params.Interval)
	return max(1, b)
}

// quotaLocked returns key's count for the window holding wall, loading it
// from the committed count when the window (or the limit's period) is new
// to this leader; nil when its limit has no quota. p.mu is held.
func (p *Pacer) quotaLocked(key string, ks *keyState, wall time.Time) *quota {
	if ks.limit.Quota == 0 || !ks.hasLimit {
		ks.q = nil
		return nil
	}
	start, end := ks.limit.Per.Window(wall)
	if q := ks.q; q != nil && q.per == ks.limit.Per && q.window == start.Unix() {
		return q
	}
	q := &quota{per: ks.limit.Per, window: start.Unix(), end: end}
	if p.Quotas != nil && !p.Fresh { // Fresh: the unsafe twin, as with horizons
		if c, ok := p.Quotas(key); ok && c.Per == q.per {
			switch {
			case c.Window == q.window:
				q.used, q.committed = c.Count, c.Count
			case c.Window > q.window:
				// A leader whose clock ran ahead of this one's already
				// counts a later window (the state keeps only the latest):
				// this window's count is gone, so it is closed here, not
				// begun again at 0.
				q.used, q.committed = ks.limit.Quota, ks.limit.Quota
			}
		}
	}
	ks.q = q
	return q
}

// quotaCheck is a grant's look at key's quota: count events at instant
// at (the pacer's clock). It reads the wall clock only for a key with a
// quota, and returns its window's end on the pacer's clock (0: no quota);
// a grant at or past it waits for the next window (awaitWindow). It
// refuses a spent quota (the reset in the error) and reports whether the
// committed count is short (the caller waits for an extension: q.need is
// set).
func (p *Pacer) quotaCheck(key string, ks *keyState, now, at, count int64) (end int64, short bool, err error) {
	if ks.limit.Quota == 0 {
		ks.q = nil // a quota removed: nothing left to count
		return 0, false, nil
	}
	wallNow := p.Wall()
	q := p.quotaLocked(key, ks, wallNow)
	if q.used+count > ks.limit.Quota {
		return 0, false, &raftpace.QuotaExhaustedError{Key: key, Quota: ks.limit.Quota, Per: q.per.String(), Reset: q.end}
	}
	end = now + int64(q.end.Sub(wallNow))
	if at < end && q.used+count > q.committed {
		q.need = max(q.need, q.used+count)
		return end, true, nil
	}
	return end, false, nil
}

// spend counts a grant of count events against key's quota (checked).
func (p *Pacer) spend(key string, ks *keyState, count int64) {
	if q := ks.q; q != nil {
		q.used += count
		if q.committed-q.used < p.quotaBatch(ks)/2 && q.committed < ks.limit.Quota {
			p.kickKey(key)
		}
	}
}

// quotaEntry returns the entry that commits key's count ahead of need,
// if one is due: a request waits on it, or the key is busy and less than
// half a batch is left.
func (p *Pacer) quotaEntry(key string, ks *keyState, wallNow time.Time, active bool) (fsm.QuotaEntry, bool) {
	q := p.quotaLocked(key, ks, wallNow)
	if q == nil {
		return fsm.QuotaEntry{}, false
	}
	batch := p.quotaBatch(ks)
	if q.need <= q.committed && !(active && q.committed-q.used < batch/2) {
		return fsm.QuotaEntry{}, false
	}
	target := min(ks.limit.Quota, max(q.used, q.need)+batch)
	if target <= q.committed {
		return fsm.QuotaEntry{}, false
	}
	return fsm.QuotaEntry{Key: key, QuotaCount: fsm.QuotaCount{Per: q.per, Window: q.window, Count: target}}, true
}

// Remaining is what a key's limit has left, read on the leader.
func (p *Pacer) Remaining(key string) (raftpace.Remaining, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return raftpace.Remaining{}, wire.ErrNotLeader
	}
	ks := p.keyLocked(key)
	if ks == nil || !ks.hasLimit {
		return raftpace.Remaining{}, fmt.Errorf("node: remaining %q: %w", key, raftpace.ErrUnknownKey)
	}
	now := p.now()
	wallNow := p.Wall()
	r := raftpace.Remaining{Key: key, Burst: ks.limit.Burst}
	// Events the rate would grant at once, fleet-wide: GCRA's tokens.
	if free := now + ks.params.Tolerance + ks.params.Interval - max(now, ks.tat); free > 0 {
		r.Tokens = int(min(int64(ks.limit.Burst), free/ks.params.Interval))
	}
	if q := p.quotaLocked(key, ks, wallNow); q != nil {
		start := time.Unix(q.window, 0).UTC()
		r.Quota, r.Per, r.Used, r.Left = ks.limit.Quota, q.per.String(), q.used, max(0, ks.limit.Quota-q.used)
		r.WindowStart, r.Reset = start, q.end
	}
	return r, nil
}

// awaitWindow holds a request whose slot lies in its quota's next window
// until that window begins (p.mu held; released here): nil, ask again;
// ErrRetry when the hold's bound comes first. (The slot is within the
// caller's maximum wait, so the window's start is too.)
func (p *Pacer) awaitWindow(until int64, key string, h hold, ctx context.Context, done <-chan struct{}) error {
	p.mu.Unlock()
	if until <= h.horizon {
		return p.wait(until, nil, ctx, done, key, "its quota's next window", nil)
	}
	return p.wait(h.horizon, nil, ctx, done, key, "its quota's next window", wire.ErrRetry)
}

// quotaSweepEvery spaces Collect's looks for committed counts of ended
// windows whose keys are not in memory.
const quotaSweepEvery = int64(time.Minute)

// endedQuotas returns removals for the committed counts whose window has
// ended, of keys not in memory (p.mu held): they hold nothing a grant
// could need, and keys made by templates must not stay in the state.
func (p *Pacer) endedQuotas(now int64, wallNow time.Time, room int) []fsm.QuotaEntry {
	if p.StoredQuotas == nil || room <= 0 || now-p.swept < quotaSweepEvery {
		return nil
	}
	p.swept = now
	var out []fsm.QuotaEntry
	for key, c := range p.StoredQuotas() {
		if len(out) == room {
			p.swept = 0 // more next time
			break
		}
		if _, inMemory := p.keys[key]; inMemory {
			continue
		}
		if _, end := c.Per.Window(time.Unix(c.Window, 0)); !wallNow.Before(end) {
			out = append(out, fsm.QuotaEntry{Key: key})
		}
	}
	return out
}
