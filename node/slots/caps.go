package slots

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// SetCap sets key's fleet-wide concurrency cap (1..fsm.MaxCap) for the
// whole cluster. When it returns, this node has applied it.
func (s *Slots) SetCap(ctx context.Context, key string, max int) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: set cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if max < 1 || max > fsm.MaxCap {
		return fmt.Errorf("node: set cap %q: %w: max %d must be 1..%d", key, raftpace.ErrInvalidRequest, max, fsm.MaxCap)
	}
	return s.changeCap(ctx, key, max)
}

// DeleteCap removes key's cap: Acquire on it then fails with
// ErrUnknownKey. Slots held stay until released or expired.
func (s *Slots) DeleteCap(ctx context.Context, key string) error {
	if err := fsm.ValidateKey(key); err != nil {
		return fmt.Errorf("node: delete cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	return s.changeCap(ctx, key, 0)
}

func (s *Slots) changeCap(ctx context.Context, key string, max int) error {
	what := fmt.Sprintf("set cap %q", key)
	return s.d.CommitOnLeader(ctx, what, wire.MethodSetCap, wire.CapReq{Key: key, Max: max}.Encode(),
		func() (uint64, error) { return s.applyCap(key, max) })
}

func (s *Slots) applyCap(key string, max int) (uint64, error) {
	var c fsm.Command = &fsm.SetCap{Key: key, Max: max}
	if max == 0 {
		c = &fsm.DeleteCap{Key: key}
	}
	index, err := s.d.Commit(c)
	if err != nil && !errors.Is(err, wire.ErrNotLeader) {
		return 0, fmt.Errorf("node: set cap %q: %w", key, err)
	}
	return index, err
}

// Cap returns key's cap as this node applied it, or ErrUnknownKey.
func (s *Slots) Cap(ctx context.Context, key string) (int, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("node: cap: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c, ok := s.d.State.Cap(key)
	if !ok {
		return 0, fmt.Errorf("node: cap %q: %w: no concurrency cap is set", key, raftpace.ErrUnknownKey)
	}
	return c, nil
}

// Caps returns every cap, as this node applied them.
func (s *Slots) Caps(ctx context.Context) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.d.State.Caps(), nil
}

// InUse returns, per key with a cap, the slots held as this node
// measures them (raft-granted slots not yet expired, plus this node's own
// fallback slots).
func (s *Slots) InUse() map[string]int {
	held, _ := s.d.View()
	now := s.d.Now()
	out := make(map[string]int)
	for key := range s.d.State.Caps() {
		out[key] = 0
	}
	for _, h := range held {
		if h.Expires > now {
			for _, k := range h.Keys {
				out[k]++
			}
		}
	}
	for k, c := range s.d.Fallback.InUse(now) {
		out[k] += c
	}
	return out
}
