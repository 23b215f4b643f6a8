// Package gate is a raftpace node's refusal gate: when a remote side
// refuses (429, 503) and says when to come back, one worker records a pause
// for the key and every worker in the fleet holds off until it ends.
//
// # What it promises
//
// A pause is replicated through raft as a duration, measured by each node
// from its own apply of the entry (fsm.SetPause), so no host's wall clock
// is trusted and a follower's pause ends no earlier than the leader's. It is
// an atomic maximum: the leader serialises every pause under one lock and
// proposes a new entry only when the hint reaches past the deadline already
// in force, so a shorter hint arriving later never shortens a longer pause,
// and of two concurrent hints the later deadline stays. An expired pause is
// cleared by the leader (an entry with For 0), so a snapshot restored later
// does not resurrect it.
//
// The node that records a pause holds its own callers off at once, before
// the entry commits, and keeps doing so if no leader can be reached: the
// caller hears about the failure, and this node at least obeys the refusal
// it saw. The check on the hot path (Wait, PausedFor) takes no lock.
//
// Errors and log lines are the node's: they say "node:", as they did when
// this was part of package node.
//
// # What it may depend on
//
// Packages raftpace (the errors a request ends in), fsm (the SetPause
// command and its bounds) and node/wire (the Pause RPC). It does not import
// node: its node gives it, in Deps, the deadlines the node's fsm applies, the
// lock the node's restore shares, a clock, a logger, a counter, and the
// node's own ways to commit through raft and to call the leader.
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// Deps is what a Gate is given by its node.
type Deps struct {
	// Applied holds the pauses as this node applied them from the log,
	// each measured from this node's apply. The node's fsm writes it; the
	// gate only reads it.
	Applied *Deadlines
	// Mu serialises the leader's writers of pauses: the atomic maximum,
	// the clearing of expired pauses, and the node's restore from a
	// checkpoint, which takes it too.
	Mu     *sync.Mutex
	Now    func() int64 // the node's monotonic clock, in nanoseconds
	Log    *slog.Logger
	Pauses *atomic.Uint64 // counts the pauses this node committed as leader

	// Commit commits c through raft on this node, the leader, and returns
	// its index once this node applied it; not leading: wire.ErrNotLeader.
	Commit func(c fsm.Command) (uint64, error) // bounded by node's commit timeout
	// Leading reports whether raft says this node leads now.
	Leading func() bool
	// The node's leader calls (node/leadercall.go): CallLeader sends one
	// RPC to the leader; LeaderErr turns an answer's code into an error;
	// UntilDone retries a failure wrapping wire.ErrRetry (or another the node
	// deems retryable) until ctx ends; WaitApplied returns once this node
	// applied an index.
	CallLeader  func(ctx context.Context, what string, method uint8, req []byte) ([]byte, error)
	LeaderErr   func(what string, code uint8, msg string) error
	UntilDone   func(ctx context.Context, what string, once func() error) error
	WaitApplied func(ctx context.Context, index uint64) error
	// Sleep sleeps d, or returns early with an error when ctx or the node
	// ends.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Gate is one node's refusal gate. Build it with New.
type Gate struct {
	d    Deps
	here Deadlines // pauses this node recorded itself, in force at once
}

// New returns the gate of a node.
func New(d Deps) *Gate { return &Gate{d: d} }

// ErrLeaderPaused: the leader refused a grant because the key is paused.
// The node has recorded the pause locally; Reserve checks its gate again.
var ErrLeaderPaused = errors.New("node: the key is paused on the leader")

// LeaderPaused records a pause the leader reported and returns
// ErrLeaderPaused.
func (g *Gate) LeaderPaused(key string, remaining time.Duration) error {
	if remaining > 0 {
		now := g.d.Now()
		g.here.Extend(key, now+int64(min(remaining, fsm.MaxPause)), now)
	}
	return fmt.Errorf("%w: %q for another %v", ErrLeaderPaused, key, remaining)
}

// Pause records a refusal of key for d: no event of key is admitted by any
// node of the fleet until the pause ends. If a longer pause is already in
// force it stays; Pause returns the remaining pause in force after the call
// (as the leader measured it). d must be in (0, fsm.MaxPause].
//
// When Pause returns nil, every later Reserve on this node sees the pause,
// and every other node sees it once it applies the entry (milliseconds).
// On an error (no leader before ctx ended) this node still holds its own
// callers off for d.
func (g *Gate) Pause(ctx context.Context, key string, d time.Duration) (time.Duration, error) {
	if err := fsm.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("node: pause: %w: %w", raftpace.ErrInvalidRequest, err)
	}
	if d <= 0 || d > fsm.MaxPause {
		return 0, fmt.Errorf("node: pause %q: %w: duration %v must be in (0, %v]", key, raftpace.ErrInvalidRequest, d, fsm.MaxPause)
	}
	now := g.d.Now()
	g.here.Extend(key, now+int64(d), now)
	what := fmt.Sprintf("pause %q", key)
	var remaining time.Duration
	var index uint64
	err := g.d.UntilDone(ctx, what, func() (err error) {
		remaining, index, err = g.pauseOnce(ctx, what, key, d)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%w (this node holds off for %v anyway)", err, d)
	}
	if index > 0 {
		if err := g.d.WaitApplied(ctx, index); err != nil {
			return remaining, err
		}
	}
	return remaining, nil
}

func (g *Gate) pauseOnce(ctx context.Context, what, key string, d time.Duration) (time.Duration, uint64, error) {
	if g.d.Leading() {
		return g.LeaderPause(key, d)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := g.d.CallLeader(cctx, what, wire.MethodPause, wire.PauseReq{Key: key, For: d}.Encode())
	if err != nil {
		return 0, 0, err
	}
	resp, err := wire.DecodePauseResp(raw)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", wire.ErrRetry, err)
	}
	if err := g.d.LeaderErr(what, resp.Code, resp.Msg); err != nil {
		return 0, 0, err
	}
	return resp.Remaining, resp.Index, nil
}

// LeaderPause is the atomic maximum. Mu is held across the commit, so the
// deadline read here includes every earlier pause; the commit returns only
// once this node applied the entry.
func (g *Gate) LeaderPause(key string, d time.Duration) (time.Duration, uint64, error) {
	g.d.Mu.Lock()
	defer g.d.Mu.Unlock()
	now := g.d.Now()
	if end, ok := g.d.Applied.Get(key); ok && end >= now+int64(d) {
		return time.Duration(end - now), 0, nil // a longer pause is in force
	}
	index, err := g.d.Commit(&fsm.SetPause{Key: key, For: d})
	if err != nil {
		return 0, 0, err
	}
	g.d.Pauses.Add(1)
	g.d.Log.Info("key paused for the fleet", "key", key, "for", d)
	return d, index, nil
}

// ClearExpired removes pauses that ended on the leader's clock.
// Followers measured theirs from a later apply, so this ends them at most
// their replication lag early, never before the leader's deadline.
func (g *Gate) ClearExpired() {
	g.d.Mu.Lock()
	defer g.d.Mu.Unlock()
	now := g.d.Now()
	for key, end := range g.d.Applied.All() {
		if end > now {
			continue
		}
		if _, err := g.d.Commit(&fsm.SetPause{Key: key, For: 0}); err != nil {
			g.d.Log.Debug("clearing an expired pause failed; will retry", "key", key, "err", err)
			return
		}
	}
}

// PausedFor returns key's remaining pause on this node; 0 if none.
func (g *Gate) PausedFor(key string) time.Duration {
	now := g.d.Now()
	end, _ := g.d.Applied.Get(key)
	if here, ok := g.here.Get(key); ok {
		end = max(end, here)
	}
	if end <= now {
		return 0
	}
	return time.Duration(end - now)
}

// Pauses returns every key's remaining pause on this node.
func (g *Gate) Pauses() map[string]time.Duration {
	now := g.d.Now()
	out := make(map[string]time.Duration)
	for key, end := range maxEnds(g.d.Applied.All(), g.here.All()) {
		if end > now {
			out[key] = time.Duration(end - now)
		}
	}
	return out
}

func maxEnds(a, b map[string]int64) map[string]int64 {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] = max(out[k], v)
	}
	return out
}

// Wait holds a reservation of key while it is paused, or returns a
// *PausedError when the pause outlasts maxWait. Nothing is consumed.
func (g *Gate) Wait(ctx context.Context, key string, maxWait time.Duration) error {
	start := time.Now()
	for {
		p := g.PausedFor(key)
		if p <= 0 {
			return nil
		}
		if p > maxWait-time.Since(start) {
			return &raftpace.PausedError{Key: key, Remaining: p, MaxWait: maxWait}
		}
		if err := g.d.Sleep(ctx, p); err != nil {
			return fmt.Errorf("node: reserve %q: waiting out its pause: %w", key, err)
		}
	}
}

// Serve answers a Pause RPC from another node (wire.MethodPause); leading
// says whether raft says this node leads.
func (g *Gate) Serve(leading bool, req []byte) []byte {
	m, err := wire.DecodePauseReq(req)
	if err == nil {
		err = fsm.ValidateKey(m.Key)
	}
	if err == nil && (m.For <= 0 || m.For > fsm.MaxPause) {
		err = fmt.Errorf("pause %v must be in (0, %v]", m.For, fsm.MaxPause)
	}
	if err != nil {
		return wire.PauseResp{Code: wire.CodeInvalid, Msg: wire.ErrMsg(err)}.Encode()
	}
	if !leading {
		return wire.PauseResp{Code: wire.CodeNotLeader}.Encode()
	}
	remaining, index, err := g.LeaderPause(m.Key, m.For)
	return wire.PauseResp{Code: wire.CodeFor(err), Index: index, Remaining: remaining, Msg: wire.ErrMsg(err)}.Encode()
}
