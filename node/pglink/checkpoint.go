package pglink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// restoreHorizonsTimeout bounds the commit of the restored horizons (one
// entry for every key of the checkpoint).
const restoreHorizonsTimeout = 10 * time.Second

// Loop publishes this node's addresses and, on the leader, writes
// the checkpoint every CheckpointEvery and soon after every change.
// It returns when the node's context ends; the caller runs it under WG.
func (p *Link) Loop() {
	lastPublish := time.Time{}
	loop.Every(p.d.Ctx, p.cfg.CheckpointEvery, p.kick, func() bool {
		ctx, cancel := context.WithTimeout(p.d.Ctx, 10*time.Second)
		s, err := p.get(ctx)
		if err == nil && time.Since(lastPublish) > 10*time.Second {
			err = s.PublishAddress(ctx, p.cfg.NodeID, p.d.Addr(), p.d.GossipAddr())
			p.note(err)
			if err == nil {
				lastPublish = time.Now()
			}
		}
		if err == nil && p.d.Granting() && !p.restorePending.Load() {
			err = s.SaveCheckpoint(ctx, p.checkpoint())
			p.note(err)
			if err != nil && !errors.Is(err, pgstore.ErrUnavailable) {
				p.d.Log.Error("checkpoint refused", "err", err)
			}
		}
		cancel()
		return true
	})
}

// checkpoint is the state a restart from empty data dirs needs: limits,
// members, concurrency caps, per key how far ahead of now its horizon lies
// (the leader's committed horizon, or the one this node measured, whichever
// is later), and per key how long its refusal pause still runs on this
// node's clock (pauses already over are left out).
func (p *Link) checkpoint() pgstore.Checkpoint {
	st := p.d.State
	cp := pgstore.Checkpoint{
		Limits:   st.Limits(),
		Members:  st.Members(),
		Horizons: make(map[string]time.Duration),
		Caps:     st.Caps(),
		Pauses:   make(map[string]time.Duration),
	}
	now := p.d.Now()
	views := p.d.HorizonsIn()
	for key := range st.Horizons() {
		h, _ := p.d.Horizon(key)
		if in, ok := views[key]; ok && now+int64(in) > h {
			h = now + int64(in)
		}
		ahead := time.Duration(max(0, h-now))
		cp.Horizons[key] = min(ahead, fsm.MaxHorizonAhead)
	}
	for key, end := range p.d.Pauses() {
		if end > now {
			cp.Pauses[key] = min(time.Duration(end-now), fsm.MaxPause)
		}
	}
	cp.Quotas = p.quotaFloors(st)
	return cp
}

// quotaFloors are the committed quota counts, each raised by what the
// leader may commit of its key before the next checkpoint (two intervals
// of the rate, and the burst; at most the quota): a cluster restored from
// this checkpoint so starts each window at a count no lower than the old
// cluster's, as long as checkpoints keep being written. It loses that
// margin of the window's quota instead of spending it twice.
func (p *Link) quotaFloors(st *fsm.State) map[string]fsm.QuotaCount {
	out := make(map[string]fsm.QuotaCount)
	for key, c := range st.QuotaCounts() {
		if lim, ok := st.Limit(key); ok && lim.Quota != 0 {
			margin := int64(math.Ceil(lim.Rate*(2*p.cfg.CheckpointEvery).Seconds())) + int64(lim.Burst)
			c.Count = min(lim.Quota, c.Count+margin)
		}
		out[key] = c
	}
	return out
}

// restore fills a brand-new cluster's empty state from the checkpoint:
// horizons first (so no key can start before the old cluster's last
// grants), then limits, concurrency caps and refusal pauses. It runs on a
// leader that started with empty data dirs before it grants anything; until
// it succeeds (Postgres may be down) the cluster has no limits and admits
// nothing, and no checkpoint is written over the one it needs.
func (p *Link) restore(ctx context.Context) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	cp, found, err := s.LoadCheckpoint(ctx)
	p.note(err)
	if err != nil {
		return err
	}
	if !found {
		p.d.Log.Info("no checkpoint in postgres: starting with no limits")
		return nil
	}
	var ext fsm.ExtendHorizons
	for key, ahead := range cp.Horizons {
		if ahead > 0 && !p.cfg.RestoreLimitsOnly {
			ext.Entries = append(ext.Entries, fsm.HorizonEntry{Key: key, Ahead: ahead})
		}
	}
	if len(ext.Entries) > 0 {
		if _, err := p.d.CommitWithin(&ext, restoreHorizonsTimeout); err != nil {
			return fmt.Errorf("node: restore horizons: %w", err)
		}
	}
	var counts fsm.CommitQuotas // before the limits, like the horizons
	for key, c := range cp.Quotas {
		if !p.cfg.RestoreLimitsOnly {
			counts.Entries = append(counts.Entries, fsm.QuotaEntry{Key: key, QuotaCount: c})
		}
	}
	for len(counts.Entries) > 0 {
		batch := counts.Entries[:min(len(counts.Entries), fsm.MaxHorizonEntries)]
		if _, err := p.d.CommitWithin(&fsm.CommitQuotas{Entries: batch}, restoreHorizonsTimeout); err != nil {
			return fmt.Errorf("node: restore quota counts: %w", err)
		}
		counts.Entries = counts.Entries[len(batch):]
	}
	for key, lim := range cp.Limits {
		if _, err := p.d.SetLimit(key, lim); err != nil {
			return fmt.Errorf("node: restore limit %q: %w", key, err)
		}
	}
	for key, max := range cp.Caps {
		if _, err := p.d.Commit(&fsm.SetCap{Key: key, Max: max}); err != nil {
			return fmt.Errorf("node: restore cap %q: %w", key, err)
		}
	}
	pauses, err := p.restorePauses(cp.Pauses)
	if err != nil {
		return err
	}
	p.d.Log.Info("restored from the postgres checkpoint", "limits", len(cp.Limits), "horizons", len(ext.Entries), "quota_counts", len(cp.Quotas),
		"caps", len(cp.Caps), "pauses", pauses)
	return nil
}

// restorePauses commits a SetPause for each pause of the checkpoint and
// returns how many it committed. Each is the time the pause still ran when
// LoadCheckpoint read it on Postgres's clock; the entry measures it again
// from this cluster's apply, which comes at or after that reading, so a
// restored pause ends no earlier than the old cluster's did: it can only
// last longer, which is safe (it errs on the side of the refusal).
//
// Like the gate's leader pause it takes the maximum under the pause lock:
// a Pause that reached this leader while it restored and reaches further
// is kept, not shortened.
func (p *Link) restorePauses(pauses map[string]time.Duration) (int, error) {
	p.d.PauseMu.Lock()
	defer p.d.PauseMu.Unlock()
	count := 0
	for key, d := range pauses {
		if end, ok := p.d.Pause(key); ok && end >= p.d.Now()+int64(d) {
			continue // a longer pause is already in force
		}
		if _, err := p.d.Commit(&fsm.SetPause{Key: key, For: d}); err != nil {
			return count, fmt.Errorf("node: restore pause %q: %w", key, err)
		}
		count++
	}
	return count, nil
}

// RestoreBeforeLeading runs the checkpoint restore when this leader heads a
// cluster that started empty; it retries until it succeeds or leadership
// moves on (gen changes). It reports whether to go on leading.
func (p *Link) RestoreBeforeLeading(gen uint64) bool {
	if !p.d.FreshStart() || len(p.d.State.Limits()) > 0 || len(p.d.State.Horizons()) > 0 {
		return true
	}
	p.restorePending.Store(true)
	defer p.restorePending.Store(false)
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(p.d.Ctx, 10*time.Second)
		err := p.restore(ctx)
		cancel()
		if err == nil {
			return true
		}
		p.d.Log.Warn("cannot restore the new cluster from postgres yet; granting nothing until it can", "err", err)
		if p.d.Sleep(context.Background(), backoff) != nil || !p.d.SameGen(gen) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
