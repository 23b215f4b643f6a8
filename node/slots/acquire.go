package slots

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// Acquire takes one slot on each of keys at once (all or nothing) for
// at most ttl (at most Deps.MaxSlotTTL), waiting up to maxWait for room
// under every key's cap. Past maxWait it returns a *ConcurrencyLimitError;
// a key without a cap gives ErrUnknownKey. Waiting callers are not served
// in order.
func (s *Slots) Acquire(ctx context.Context, keys []string, ttl, maxWait time.Duration) (_ raftpace.Slot, err error) {
	keys, err = CheckKeys(keys)
	if err != nil {
		return raftpace.Slot{}, fmt.Errorf("node: acquire slots: %w", err)
	}
	defer func() { s.d.Outcome(keys, err) }()
	if ttl <= 0 || ttl > s.d.MaxSlotTTL {
		return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w: ttl %v must be in (0, %v] (Config.MaxSlotTTL)", keys, raftpace.ErrInvalidRequest, ttl, s.d.MaxSlotTTL)
	}
	maxWait = max(maxWait, 0)
	first := time.Now()
	deadline := first.Add(maxWait)
	req := wire.AcquireReq{ID: s.newID(""), Holder: s.d.NodeID, Keys: keys, TTL: ttl}
	var full []string
	var lastErr error
	backoff := time.Millisecond
	// refused ends the call with the cap full for keys full: counted once.
	refused := func(full []string) (raftpace.Slot, error) {
		s.d.Count.Refused.Add(1)
		return raftpace.Slot{}, &raftpace.ConcurrencyLimitError{Keys: keys, Full: full, MaxWait: maxWait}
	}
	for {
		if s.closed() {
			return raftpace.Slot{}, raftpace.ErrClosed
		}
		if s.d.Fallback.Active() {
			sl, f, err := s.d.Fallback.Acquire(s.newID(LocalPrefix), keys, ttl)
			if err == nil {
				s.d.Count.Acquired.Add(1)
				return sl, nil
			}
			if !errors.Is(err, raftpace.ErrConcurrencyLimit) && !errors.Is(err, wire.ErrNotLeader) {
				return raftpace.Slot{}, err
			}
			if errors.Is(err, raftpace.ErrConcurrencyLimit) {
				full, lastErr = f, err
			}
			if time.Now().After(deadline) {
				_, err := refused(full)
				return raftpace.Slot{}, fmt.Errorf("%w (%w)", err, lastErr)
			}
			if err := s.d.Sleep(ctx, 50*time.Millisecond); err != nil {
				return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w", keys, err)
			}
			continue
		}
		remaining := time.Until(deadline)
		// One call waits at most a second at the leader, so a leader change
		// is noticed; the same ID is sent again, and a leader that already
		// granted it just says so. It answers a little before the caller's
		// deadline, which is often its context's: a full cap then reads as
		// ErrConcurrencyLimit, not as the context's error.
		req.MaxWait = min(max(remaining-remaining/10, 0), time.Second)
		f, err := s.acquireOnce(ctx, req)
		if err != nil && ctx.Err() != nil && (len(full) > 0 || errors.Is(err, raftpace.ErrConcurrencyLimit)) {
			s.releaseAsync(req.ID)
			return refused(append(full, f...))
		}
		switch {
		case err == nil:
			s.d.Count.Acquired.Add(1)
			return raftpace.Slot{ID: req.ID, Keys: keys, Deadline: first.Add(ttl)}, nil
		case errors.Is(err, raftpace.ErrConcurrencyLimit):
			full = f
			if remaining <= 0 {
				return refused(full)
			}
			continue
		case !s.d.Retryable(err):
			return raftpace.Slot{}, err
		}
		if time.Now().After(deadline) {
			// The leader may have granted the slot in a call whose answer
			// was lost: give it back rather than leak it for the TTL.
			s.releaseAsync(req.ID)
			return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w within max wait %v: %w", keys, raftpace.ErrNoLeader, maxWait, err)
		}
		if err := s.d.Sleep(ctx, backoff); err != nil {
			s.releaseAsync(req.ID)
			if len(full) > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return refused(full)
			}
			return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w", keys, err)
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// acquireOnce asks the leader (this node, or forwarded) once.
func (s *Slots) acquireOnce(ctx context.Context, req wire.AcquireReq) ([]string, error) {
	if s.d.Leading() {
		return s.leaderAcquire(ctx, req)
	}
	addr := s.d.LeaderAddr()
	if addr == "" {
		return nil, wire.ErrRetry
	}
	// The caller's deadline does not cut the call short: the leader answers
	// within req.MaxWait, which ends before that deadline, and a late answer
	// "the cap is full" is worth more than "context deadline exceeded".
	// Cancelling the caller's context still ends the call.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), req.MaxWait+2*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	raw, err := s.d.Call(cctx, addr, wire.MethodAcquireSlots, req.Encode())
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, fmt.Errorf("node: acquire slots %q: %w", req.Keys, ctx.Err())
		}
		return nil, fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	resp, err := wire.DecodeAcquireResp(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	if resp.Code == wire.CodeConcurrency {
		return resp.Full, fmt.Errorf("%w (leader: %s)", raftpace.ErrConcurrencyLimit, resp.Msg)
	}
	return nil, s.d.LeaderErr(fmt.Sprintf("acquire slots %q", req.Keys), resp.Code, resp.Msg)
}

// leaderAcquire grants req once every key has room, waiting up to
// req.MaxWait. It returns the full keys with ErrConcurrencyLimit.
func (s *Slots) leaderAcquire(ctx context.Context, req wire.AcquireReq) ([]string, error) {
	if !s.d.Granting() {
		return nil, wire.ErrNotLeader // elected, but the barrier has not passed
	}
	deadline := time.Now().Add(req.MaxWait)
	for {
		s.mu.Lock()
		held, ch := s.d.View()
		if _, ok := held[req.ID]; ok {
			s.mu.Unlock()
			return nil, nil // granted by an earlier call whose answer was lost
		}
		now := s.d.Now()
		full, wake, err := s.fullKeys(req.Keys, held, now)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if len(full) == 0 {
			_, err := s.d.Commit(&fsm.AcquireSlots{ID: req.ID, Holder: req.Holder, Keys: req.Keys, TTL: req.TTL})
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return full, fmt.Errorf("%w: %q full", raftpace.ErrConcurrencyLimit, full)
		}
		t := time.NewTimer(min(left, time.Duration(wake-now), 250*time.Millisecond))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's time ran out with the cap full: that is
				// its answer, whichever of the timer and the deadline a
				// late wake-up (a loaded machine) happened to see first.
				return full, fmt.Errorf("%w: %q full", raftpace.ErrConcurrencyLimit, full)
			}
			return nil, fmt.Errorf("%w: %w", wire.ErrRetry, ctx.Err())
		case <-s.d.Ctx.Done():
			t.Stop()
			return nil, raftpace.ErrClosed
		}
		t.Stop()
		if !s.d.Granting() {
			return nil, wire.ErrNotLeader
		}
	}
}

// fullKeys returns the keys with no room for one more slot, and when the
// first slot on one of them expires. A key without a cap is an error.
func (s *Slots) fullKeys(keys []string, held map[string]Held, now int64) ([]string, int64, error) {
	var full []string
	wake := int64(math.MaxInt64)
	unheld := s.d.Unheld(now)
	for _, key := range keys {
		c, ok := s.d.State.Cap(key)
		if !ok {
			return nil, 0, fmt.Errorf("node: acquire slot %q: %w: no concurrency cap is set for it (raftpace slots set)", key, raftpace.ErrUnknownKey)
		}
		room := c
		for _, f := range unheld {
			room -= int(math.Floor(f * float64(c)))
		}
		inUse := 0
		for _, h := range held {
			if h.Expires > now && slices.Contains(h.Keys, key) {
				inUse++
				wake = min(wake, h.Expires)
			}
		}
		if inUse >= room {
			full = append(full, key)
		}
	}
	return full, wake, nil
}

// Release gives the slot back. Releasing twice, or after the slot
// expired, is a no-op. If no leader answers before ctx ends, the slot is
// reclaimed at its deadline anyway.
func (s *Slots) Release(ctx context.Context, sl raftpace.Slot) error {
	if strings.HasPrefix(sl.ID, LocalPrefix) {
		s.d.Fallback.Release(sl.ID)
		s.d.Count.Released.Add(1)
		return nil
	}
	if err := fsm.ValidateID(sl.ID); err != nil {
		return fmt.Errorf("node: release slot: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if !time.Now().Before(sl.Deadline) {
		return nil // expired: the leader reclaims it, and may have already
	}
	what := "release slot " + sl.ID
	err := s.d.UntilDone(ctx, what, func() error {
		_, err := s.d.IndexOnLeader(ctx, what, wire.MethodReleaseSlots, wire.ReleaseReq{IDs: []string{sl.ID}}.Encode(),
			func() (uint64, error) { return s.leaderRelease([]string{sl.ID}) })
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (the slot expires at its deadline anyway)", err)
	}
	s.d.Count.Released.Add(1)
	return nil
}

func (s *Slots) releaseAsync(id string) {
	s.d.WG.Add(1)
	go func() {
		defer s.d.WG.Done()
		ctx, cancel := context.WithTimeout(s.d.Ctx, 5*time.Second)
		defer cancel()
		_ = s.Release(ctx, raftpace.Slot{ID: id, Deadline: time.Now().Add(time.Minute)})
	}()
}

// leaderRelease commits the release of the ids that are still held.
func (s *Slots) leaderRelease(ids []string) (uint64, error) {
	held, _ := s.d.View()
	var live []string
	for _, id := range ids {
		if _, ok := held[id]; ok {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return 0, nil
	}
	return s.d.Commit(&fsm.ReleaseSlots{IDs: live})
}

// Reap deletes slots whose TTL passed on the leader's clock.
func (s *Slots) Reap() {
	held, _ := s.d.View()
	now := s.d.Now()
	var expired []string
	for id, h := range held {
		if h.Expires <= now {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for len(expired) > 0 {
		batch := expired[:min(len(expired), fsm.MaxReleaseIDs)]
		expired = expired[len(batch):]
		if _, err := s.d.Commit(&fsm.ReleaseSlots{IDs: batch}); err != nil {
			s.d.Log.Debug("reclaiming expired slots failed; will retry", "slots", len(batch), "err", err)
			return
		}
		s.d.Count.Expired.Add(uint64(len(batch)))
	}
}
