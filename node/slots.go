package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// Concurrency caps: a fleet-wide semaphore per key, held by the leader.
//
// Every slot is a raft entry (fsm.AcquireSlots) that the leader proposes
// only after checking, under one lock, that each of the request's keys has
// room under its cap; the lock is held across the commit, so the check
// always sees every earlier grant. Taking several keys is one entry, so it
// is all or nothing and cannot deadlock. A slot ends when it is released
// (fsm.ReleaseSlots) or when its TTL has passed. The TTL is measured three
// ways, and they nest: the holder's deadline runs from its first request
// (before the leader proposed anything); every node measures the entry from
// its own apply (after the proposal). So any node, and any later leader,
// counts a slot at least as long as its holder may use it: slots survive a
// leader change and are never granted twice. The leader deletes slots past
// their TTL on its clock, so a holder that died leaks its slot for at most
// the TTL.
//
// Quorum loss (DESIGN 5): a member's fraction f_i of a cap C is
// floor(f_i*C) slots. While the leader does not hold member i's share it
// keeps those slots free (the leader's cap is C minus the floors of every
// unheld share). Member i in fallback may grant from its own floor(f_i*C),
// but only once every slot the leader granted before i's share lapsed has
// surely expired — MaxSlotTTL into fallback — and every slot it grants ends
// by the time its fallback stops. Back in raft mode it reports how far its
// own slots reach, and the leader keeps its floor free until then (the
// share's Busy, as for rate slots). Slots therefore fail closed for
// MaxSlotTTL after a member loses its leader: that is the price of slots
// that outlive the share lease.

// localSlotPrefix marks the IDs of slots granted in fallback.
const localSlotPrefix = "local."

func newSlotNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (n *Node) newSlotID(prefix string) string {
	return fmt.Sprintf("%s%s.%d", prefix, n.slotNonce, n.slotSeq.Add(1))
}

// checkSlotKeys validates keys (1..fsm.MaxSlotKeys distinct valid keys) and
// returns them sorted, so equal requests encode equally.
func checkSlotKeys(keys []string) ([]string, error) {
	if len(keys) == 0 || len(keys) > fsm.MaxSlotKeys {
		return nil, fmt.Errorf("%w: %d keys: must be 1..%d", raftpace.ErrInvalidRequest, len(keys), fsm.MaxSlotKeys)
	}
	out := slices.Clone(keys)
	slices.Sort(out)
	for i, k := range out {
		if err := fsm.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
		}
		if i > 0 && out[i-1] == k {
			return nil, fmt.Errorf("%w: key %q named twice", raftpace.ErrInvalidRequest, k)
		}
	}
	return out, nil
}

// AcquireSlots takes one slot on each of keys at once (all or nothing) for
// at most ttl (at most Config.MaxSlotTTL), waiting up to maxWait for room
// under every key's cap. Past maxWait it returns a *ConcurrencyLimitError;
// a key without a cap gives ErrUnknownKey. Waiting callers are not served
// in order.
func (n *Node) AcquireSlots(ctx context.Context, keys []string, ttl, maxWait time.Duration) (_ raftpace.Slot, err error) {
	keys, err = checkSlotKeys(keys)
	if err != nil {
		return raftpace.Slot{}, fmt.Errorf("node: acquire slots: %w", err)
	}
	defer func() { n.slotsAcquired(keys, err) }()
	if ttl <= 0 || ttl > n.cfg.MaxSlotTTL {
		return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w: ttl %v must be in (0, %v] (Config.MaxSlotTTL)", keys, raftpace.ErrInvalidRequest, ttl, n.cfg.MaxSlotTTL)
	}
	maxWait = max(maxWait, 0)
	first := time.Now()
	deadline := first.Add(maxWait)
	req := wire.AcquireReq{ID: n.newSlotID(""), Holder: n.cfg.NodeID, Keys: keys, TTL: ttl}
	var full []string
	var lastErr error
	backoff := time.Millisecond
	for {
		if n.closed() {
			return raftpace.Slot{}, raftpace.ErrClosed
		}
		if n.fallback.current() != ModeRaft && n.ownFraction() > 0 {
			s, f, err := n.fallback.acquireSlots(n.newSlotID(localSlotPrefix), keys, ttl)
			if err == nil {
				n.stats.slotsAcquired.Add(1)
				return s, nil
			}
			if !errors.Is(err, raftpace.ErrConcurrencyLimit) && !errors.Is(err, wire.ErrNotLeader) {
				return raftpace.Slot{}, err
			}
			if errors.Is(err, raftpace.ErrConcurrencyLimit) {
				full, lastErr = f, err
			}
			if time.Now().After(deadline) {
				n.stats.slotsRefused.Add(1)
				return raftpace.Slot{}, fmt.Errorf("%w (%w)", &raftpace.ConcurrencyLimitError{Keys: keys, Full: full, MaxWait: maxWait}, lastErr)
			}
			if err := sleepCtx(ctx, n.ctx, 50*time.Millisecond); err != nil {
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
		f, err := n.acquireOnce(ctx, req)
		if err != nil && ctx.Err() != nil && (len(full) > 0 || errors.Is(err, raftpace.ErrConcurrencyLimit)) {
			n.releaseAsync(req.ID)
			n.stats.slotsRefused.Add(1)
			return raftpace.Slot{}, &raftpace.ConcurrencyLimitError{Keys: keys, Full: append(full, f...), MaxWait: maxWait}
		}
		switch {
		case err == nil:
			n.stats.slotsAcquired.Add(1)
			return raftpace.Slot{ID: req.ID, Keys: keys, Deadline: first.Add(ttl)}, nil
		case errors.Is(err, raftpace.ErrConcurrencyLimit):
			full = f
			if remaining <= 0 {
				n.stats.slotsRefused.Add(1)
				return raftpace.Slot{}, &raftpace.ConcurrencyLimitError{Keys: keys, Full: full, MaxWait: maxWait}
			}
			continue
		case !retryable(err):
			return raftpace.Slot{}, err
		}
		if time.Now().After(deadline) {
			// The leader may have granted the slot in a call whose answer
			// was lost: give it back rather than leak it for the TTL.
			n.releaseAsync(req.ID)
			return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w within max wait %v: %w", keys, raftpace.ErrNoLeader, maxWait, err)
		}
		if err := sleepCtx(ctx, n.ctx, backoff); err != nil {
			n.releaseAsync(req.ID)
			return raftpace.Slot{}, fmt.Errorf("node: acquire slots %q: %w", keys, err)
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// acquireOnce asks the leader (this node, or forwarded) once.
func (n *Node) acquireOnce(ctx context.Context, req wire.AcquireReq) ([]string, error) {
	if n.raft.State() == raft.Leader {
		return n.leaderAcquire(ctx, req)
	}
	addr, _ := n.raft.LeaderWithID()
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
	raw, err := n.trans.Call(cctx, string(addr), wire.MethodAcquireSlots, req.Encode())
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
	return nil, leaderErr(fmt.Sprintf("acquire slots %q", req.Keys), resp.Code, resp.Msg)
}

// leaderAcquire grants req once every key has room, waiting up to
// req.MaxWait. It returns the full keys with ErrConcurrencyLimit.
func (n *Node) leaderAcquire(ctx context.Context, req wire.AcquireReq) ([]string, error) {
	if !n.pacer.IsLeading() {
		return nil, wire.ErrNotLeader // elected, but the barrier has not passed
	}
	deadline := time.Now().Add(req.MaxWait)
	for {
		n.slotMu.Lock()
		held, ch := n.fsm.slotView()
		if _, ok := held[req.ID]; ok {
			n.slotMu.Unlock()
			return nil, nil // granted by an earlier call whose answer was lost
		}
		now := n.now()
		full, wake, err := n.fullKeys(req.Keys, held, now)
		if err != nil {
			n.slotMu.Unlock()
			return nil, err
		}
		if len(full) == 0 {
			_, err := n.commit(&fsm.AcquireSlots{ID: req.ID, Holder: req.Holder, Keys: req.Keys, TTL: req.TTL}, 5*time.Second)
			n.slotMu.Unlock()
			return nil, err
		}
		n.slotMu.Unlock()
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
			return nil, fmt.Errorf("%w: %w", wire.ErrRetry, ctx.Err())
		case <-n.ctx.Done():
			t.Stop()
			return nil, raftpace.ErrClosed
		}
		t.Stop()
		if !n.pacer.IsLeading() {
			return nil, wire.ErrNotLeader
		}
	}
}

// fullKeys returns the keys with no room for one more slot, and when the
// first slot on one of them expires. A key without a cap is an error.
func (n *Node) fullKeys(keys []string, held map[string]heldSlot, now int64) ([]string, int64, error) {
	var full []string
	wake := int64(math.MaxInt64)
	unheld := n.shares.Unheld(now)
	for _, key := range keys {
		c, ok := n.state.Cap(key)
		if !ok {
			return nil, 0, fmt.Errorf("node: acquire slot %q: %w: no concurrency cap is set for it (raftpace slots set)", key, raftpace.ErrUnknownKey)
		}
		room := c
		for _, f := range unheld {
			room -= int(math.Floor(f * float64(c)))
		}
		inUse := 0
		for _, s := range held {
			if s.expires > now && slices.Contains(s.keys, key) {
				inUse++
				wake = min(wake, s.expires)
			}
		}
		if inUse >= room {
			full = append(full, key)
		}
	}
	return full, wake, nil
}

// ReleaseSlot gives the slot back. Releasing twice, or after the slot
// expired, is a no-op. If no leader answers before ctx ends, the slot is
// reclaimed at its deadline anyway.
func (n *Node) ReleaseSlot(ctx context.Context, s raftpace.Slot) error {
	if strings.HasPrefix(s.ID, localSlotPrefix) {
		n.fallback.releaseSlot(s.ID)
		n.stats.slotsReleased.Add(1)
		return nil
	}
	if err := fsm.ValidateID(s.ID); err != nil {
		return fmt.Errorf("node: release slot: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if !time.Now().Before(s.Deadline) {
		return nil // expired: the leader reclaims it, and may have already
	}
	what := "release slot " + s.ID
	err := n.untilDone(ctx, what, func() error {
		_, err := n.indexOnLeader(ctx, what, wire.MethodReleaseSlots, wire.ReleaseReq{IDs: []string{s.ID}}.Encode(),
			func() (uint64, error) { return n.leaderRelease([]string{s.ID}) })
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (the slot expires at its deadline anyway)", err)
	}
	n.stats.slotsReleased.Add(1)
	return nil
}

func (n *Node) releaseAsync(id string) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		_ = n.ReleaseSlot(ctx, raftpace.Slot{ID: id, Deadline: time.Now().Add(time.Minute)})
	}()
}

// leaderRelease commits the release of the ids that are still held.
func (n *Node) leaderRelease(ids []string) (uint64, error) {
	held, _ := n.fsm.slotView()
	var live []string
	for _, id := range ids {
		if _, ok := held[id]; ok {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return 0, nil
	}
	return n.commit(&fsm.ReleaseSlots{IDs: live}, 5*time.Second)
}

// reapSlots deletes slots whose TTL passed on the leader's clock.
func (n *Node) reapSlots() {
	held, _ := n.fsm.slotView()
	now := n.now()
	var expired []string
	for id, s := range held {
		if s.expires <= now {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for len(expired) > 0 {
		batch := expired[:min(len(expired), fsm.MaxReleaseIDs)]
		expired = expired[len(batch):]
		if _, err := n.commit(&fsm.ReleaseSlots{IDs: batch}, 5*time.Second); err != nil {
			n.log.Debug("reclaiming expired slots failed; will retry", "slots", len(batch), "err", err)
			return
		}
		n.stats.slotsExpired.Add(uint64(len(batch)))
	}
}

// maintainLoop runs the leader's housekeeping of the gate and the caps:
// clearing expired pauses and reclaiming expired slots.
func (n *Node) maintainLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if !n.pacer.IsLeading() {
			continue
		}
		n.clearExpiredPauses()
		n.reapSlots()
	}
}

// SetCap sets key's fleet-wide concurrency cap (1..fsm.MaxCap) for the
// whole cluster. When it returns, this node has applied it.
func (n *Node) SetCap(ctx context.Context, key string, max int) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: set cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if max < 1 || max > fsm.MaxCap {
		return fmt.Errorf("node: set cap %q: %w: max %d must be 1..%d", key, raftpace.ErrInvalidRequest, max, fsm.MaxCap)
	}
	return n.changeCap(ctx, key, max)
}

// DeleteCap removes key's cap: AcquireSlots on it then fails with
// ErrUnknownKey. Slots held stay until released or expired.
func (n *Node) DeleteCap(ctx context.Context, key string) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: delete cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	return n.changeCap(ctx, key, 0)
}

func (n *Node) changeCap(ctx context.Context, key string, max int) error {
	what := fmt.Sprintf("set cap %q", key)
	return n.commitOnLeader(ctx, what, wire.MethodSetCap, wire.CapReq{Key: key, Max: max}.Encode(),
		func() (uint64, error) { return n.applyCap(key, max) })
}

func (n *Node) applyCap(key string, max int) (uint64, error) {
	var c fsm.Command = &fsm.SetCap{Key: key, Max: max}
	if max == 0 {
		c = &fsm.DeleteCap{Key: key}
	}
	index, err := n.commit(c, 5*time.Second)
	if err != nil && !errors.Is(err, wire.ErrNotLeader) {
		return 0, fmt.Errorf("node: set cap %q: %w", key, err)
	}
	return index, err
}

// Cap returns key's cap as this node applied it, or ErrUnknownKey.
func (n *Node) Cap(ctx context.Context, key string) (int, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("node: cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c, ok := n.state.Cap(key)
	if !ok {
		return 0, fmt.Errorf("node: cap %q: %w: no concurrency cap is set", key, raftpace.ErrUnknownKey)
	}
	return c, nil
}

// Caps returns every cap, as this node applied them.
func (n *Node) Caps(ctx context.Context) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.state.Caps(), nil
}

// SlotsInUse returns, per key with a cap, the slots held as this node
// measures them (raft-granted slots not yet expired, plus this node's own
// fallback slots).
func (n *Node) SlotsInUse() map[string]int {
	held, _ := n.fsm.slotView()
	now := n.now()
	out := make(map[string]int)
	for key := range n.state.Caps() {
		out[key] = 0
	}
	for _, s := range held {
		if s.expires > now {
			for _, k := range s.keys {
				out[k]++
			}
		}
	}
	for k, c := range n.fallback.localSlotsInUse(now) {
		out[k] += c
	}
	return out
}
