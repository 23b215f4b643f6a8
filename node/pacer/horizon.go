package pacer

import (
	"sort"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// maxExtendBatch bounds the keys one horizon entry carries.
const maxExtendBatch = 1024

// Extension is one batch of horizon extensions prepared under the lock.
type Extension struct {
	gen     uint64
	Cmd     fsm.ExtendHorizons
	targets map[string]int64 // key -> new local horizon (proposal time + Ahead)
	// Quotas commits quota counts ahead of use (quota.go); committed, each
	// becomes its key's count to grant under.
	Quotas fsm.CommitQuotas
}

// Commands are the extension's entries to commit, in order: horizons,
// then quota counts (the ones it has).
func (ext *Extension) Commands() []fsm.Command {
	var out []fsm.Command
	if len(ext.Cmd.Entries) > 0 {
		out = append(out, &ext.Cmd)
	}
	if len(ext.Quotas.Entries) > 0 {
		out = append(out, &ext.Quotas)
	}
	return out
}

// Collect chooses the keys whose horizon should move: those a request is
// waiting on, and those with recent demand whose horizon is less than half
// the look-ahead away. The Ahead of each entry is measured from now, which is
// taken before the entry is proposed, so the leader's own horizon is the
// earliest any node computes for the entry.
//
// It looks at every key at most once per ExtendEvery, and in between
// only at the keys a grant or a waiting request marked due (kickKey). A
// scan of every key under the pacer's lock at every kick was a fifth of
// the leader's CPU at 10,000 slow keys (perf, `raftpace bench --only keys
// --keys 10000`), and every grant waited behind it. A key that needs an
// extension without a request marking it (an active key whose horizon
// nears as time passes) is found by the full scan, which runs as often as
// the extender's tick: HorizonAhead/4, half the margin such a key has.
//
// The full scan also forgets idle keys: a key without a request for
// IdleAfter whose TAT has passed leaves the pacer, and, when the state
// holds a horizon for it, gets an entry with Ahead 0, which removes that
// horizon everywhere. That is safe by the rule every entry keeps: every
// slot ever granted for the key is before its TAT, so before now, the
// moment the entry is measured from; a later leader starts the key at its
// own now, which is later still.
func (p *Pacer) Collect() (Extension, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return Extension{}, false
	}
	now := p.now()
	wallNow := p.Wall()
	ext := Extension{gen: p.gen, targets: make(map[string]int64)}
	full := now-p.scanned >= int64(p.ExtendEvery())
	if full {
		complete := true
		for key, ks := range p.keys {
			if ext.full() {
				complete = false
				break
			}
			if now-ks.seen > int64(p.IdleAfter) && ks.tat <= now && ks.need <= ks.horizon {
				delete(p.keys, key)
				if _, ok := p.tracked(key); ok {
					ext.Cmd.Entries = append(ext.Cmd.Entries, fsm.HorizonEntry{Key: key})
				}
				continue
			}
			p.collectKey(&ext, key, ks, now, wallNow)
		}
		if complete {
			// Every key was looked at: the due ones too.
			p.scanned = now
			clear(p.due)
		}
		ext.Quotas.Entries = append(ext.Quotas.Entries, p.endedQuotas(now, wallNow, maxExtendBatch-len(ext.Quotas.Entries))...)
	} else {
		for key := range p.due {
			if ext.full() {
				break
			}
			delete(p.due, key)
			if ks := p.keys[key]; ks != nil {
				p.collectKey(&ext, key, ks, now, wallNow)
			}
		}
	}
	// Map order is random; one order makes the entry's bytes depend only
	// on what it says.
	sort.Slice(ext.Cmd.Entries, func(i, j int) bool { return ext.Cmd.Entries[i].Key < ext.Cmd.Entries[j].Key })
	sort.Slice(ext.Quotas.Entries, func(i, j int) bool { return ext.Quotas.Entries[i].Key < ext.Quotas.Entries[j].Key })
	return ext, len(ext.Cmd.Entries) > 0 || len(ext.Quotas.Entries) > 0
}

// full reports whether one of the extension's commands has as many
// entries as one carries.
func (ext *Extension) full() bool {
	return len(ext.Cmd.Entries) == maxExtendBatch || len(ext.Quotas.Entries) == maxExtendBatch
}

// ExtendEvery is the extender's tick (node's extendLoop), and how often
// Collect looks at every key: a quarter of the look-ahead, half the margin
// an active key has when its horizon needs renewing.
func (p *Pacer) ExtendEvery() time.Duration {
	return max(time.Duration(p.ahead)/4, 5*time.Millisecond)
}

// lookAhead is how far past a key's cursor its horizon is kept: the
// look-ahead, plus one interval of the key's rate. A grant claims the
// rate to its slot's end, tatp + T, and must fit under the horizon; with
// the look-ahead alone a key at 1/s needed a new horizon for nearly every
// slot (the look-ahead is a second), so its every lease waited for a raft
// commit, and a follower's 32 requests in flight (lease.InFlight) spent
// their time in those waits: at 2,000 keys at 1/s the followers admitted
// 7% each, the leader the rest. For keys faster than a few per second the
// interval adds nothing that matters. What a new leader skips grows by one
// slot of the key.
func (p *Pacer) lookAhead(ks *keyState) int64 { return p.ahead + ks.params.Interval }

// collectKey adds key's entries to ext, if it needs any: a quota count
// ahead of use, a horizon a request waits on or an active key's horizon
// less than half the look-ahead away. p.mu is held.
func (p *Pacer) collectKey(ext *Extension, key string, ks *keyState, now int64, wallNow time.Time) {
	if !ks.hasLimit {
		return
	}
	base := max(now, ks.tat)
	waiting := ks.need > ks.horizon
	active := now-ks.demand < 2*p.ahead && ks.demand != 0
	if e, ok := p.quotaEntry(key, ks, wallNow, active); ok {
		ext.Quotas.Entries = append(ext.Quotas.Entries, e)
	}
	if !waiting && !(active && ks.horizon-base < p.lookAhead(ks)/2) {
		return
	}
	target := max(base, ks.need) + p.lookAhead(ks)
	target = max(target, ks.horizon)
	ahead := target - now
	if ahead > int64(fsm.MaxHorizonAhead) {
		ahead = int64(fsm.MaxHorizonAhead)
		target = now + ahead
	}
	if ahead <= 0 {
		return
	}
	ext.Cmd.Entries = append(ext.Cmd.Entries, fsm.HorizonEntry{Key: key, Ahead: time.Duration(ahead)})
	ext.targets[key] = target
}

// Cursors returns, for a leader about to hand over (it has stopped
// granting: stepDown), every key's exact cursor as horizon entries: Ahead
// is the key's TAT minus now (at least 1ns), measured from before the
// entries are proposed. Committed, they cover every slot this leader
// granted, so its successor starts each key where this leader stopped
// instead of up to HorizonAhead later (DESIGN.md, "Hand-over").
func (p *Pacer) Cursors() []fsm.ExtendHorizons {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	keys := make([]string, 0, len(p.keys))
	for key, ks := range p.keys {
		if _, tracked := p.tracked(key); tracked || ks.tat > 0 {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var out []fsm.ExtendHorizons
	for i, key := range keys {
		if i%maxExtendBatch == 0 {
			out = append(out, fsm.ExtendHorizons{})
		}
		ahead := min(max(p.keys[key].tat-now, 1), int64(fsm.MaxHorizonAhead))
		last := &out[len(out)-1]
		last.Entries = append(last.Entries, fsm.HorizonEntry{Key: key, Ahead: time.Duration(ahead)})
	}
	return out
}

// Committed installs the horizons of a Committed extension, unless
// leadership changed meanwhile.
func (p *Pacer) Committed(ext Extension) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ext.gen != p.gen || !p.leading {
		return
	}
	for key, target := range ext.targets {
		ks := p.keys[key]
		if ks == nil {
			continue
		}
		if target > ks.horizon {
			ks.horizon = target
		}
		ks.wake()
	}
	for _, e := range ext.Quotas.Entries {
		ks := p.keys[e.Key]
		if ks == nil || ks.q == nil || ks.q.per != e.Per || ks.q.window != e.Window {
			continue // a removal, or a window this leader no longer counts
		}
		ks.q.committed = max(ks.q.committed, e.Count)
		ks.wake()
	}
}

// snapshot lists the pacer's View of each key, for status.
func (p *Pacer) View() map[string]KeyView {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make(map[string]KeyView, len(p.keys))
	for key, ks := range p.keys {
		v := KeyView{}
		if p.leading {
			v.HorizonIn = time.Duration(ks.horizon - now)
			v.Backlog = time.Duration(max(0, ks.tat-now))
		}
		out[key] = v
	}
	return out
}

type KeyView struct {
	HorizonIn time.Duration // committed horizon minus now (leader only)
	Backlog   time.Duration // TAT minus now, the queue ahead of a new request
}
