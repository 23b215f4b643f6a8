// Package slots is a raftpace node's concurrency caps: a fleet-wide
// semaphore per key, held by the leader.
//
// # What it promises
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
// that outlive the share lease. The fallback's own grants are the node's
// (Deps.Fallback); this package only asks it first while it is active.
//
// Errors and log lines are the node's: they say "node:", as they did when
// this was part of package node.
//
// # What it may depend on
//
// Packages raftpace (Slot and the errors a request ends in), fsm (the slot
// and cap commands, their bounds and validation) and node/wire (the slot
// and cap RPCs). It does not import node: its node gives it, in Deps, its
// id and MaxSlotTTL, the caps and held slots it applied, the leader's
// unheld shares, its fallback, a clock, a logger, counters, its lifetime,
// and its own ways to commit through raft and to call the leader.
package slots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// Deps is what Slots are given by their node.
type Deps struct {
	NodeID     string        // this node: the holder of the slots it takes
	MaxSlotTTL time.Duration // the longest TTL a slot may ask (Config.MaxSlotTTL)

	// State is the caps as this node applied them (a *fsm.State).
	State State
	// View returns a copy of the slots held as this node applied them,
	// each expiring TTL after its apply, and a channel closed at the next
	// change.
	View func() (map[string]Held, <-chan struct{})
	// Unheld returns, on the leader, the fractions of the members whose
	// share it does not hold at now: their part of every cap stays free.
	Unheld func(now int64) []float64
	// Fallback grants slots while the node has lost its leader.
	Fallback Fallback

	Now     func() int64 // the node's monotonic clock, in nanoseconds
	Log     *slog.Logger
	Count   Counters
	Outcome func(keys []string, err error) // per-key metrics of one Acquire

	// Ctx is the node's lifetime: when it ends, waits end with
	// raftpace.ErrClosed. WG counts the goroutines the slots start (a
	// release in the background); the node waits for them on Close.
	Ctx context.Context
	WG  *sync.WaitGroup
	// Sleep sleeps d, or returns early with an error when ctx or the node
	// ends.
	Sleep func(ctx context.Context, d time.Duration) error

	// Commit commits c through raft on this node, the leader, and returns
	// its index once this node applied it; not leading: wire.ErrNotLeader.
	Commit func(c fsm.Command) (uint64, error) // bounded by node's commit timeout
	// Leading reports whether raft says this node leads now; Granting
	// whether it also passed its barrier and grants.
	Leading, Granting func() bool
	// LeaderAddr is the leader's address as raft knows it ("" if none);
	// Call sends one RPC to an address (the node's transport).
	LeaderAddr func() string
	Call       func(ctx context.Context, addr string, method uint8, req []byte) ([]byte, error)
	// The node's leader calls (node/leadercall.go): LeaderErr turns an
	// answer's code into an error; UntilDone retries a retryable failure
	// until ctx ends; IndexOnLeader commits once, here when leading, else
	// by the RPC; CommitOnLeader is that retried, then waits until this
	// node applied it. A failure wrapping wire.ErrRetry is retried;
	// Retryable says whether another may be.
	LeaderErr      func(what string, code uint8, msg string) error
	UntilDone      func(ctx context.Context, what string, once func() error) error
	IndexOnLeader  func(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) (uint64, error)
	CommitOnLeader func(ctx context.Context, what string, method uint8, req []byte, local func() (uint64, error)) error
	Retryable      func(error) bool
}

// State reads the caps as this node applied them.
type State interface {
	Cap(key string) (int, bool)
	Caps() map[string]int
}

// Held is a concurrency slot as this node measures it.
type Held struct {
	Holder  string
	Keys    []string
	Expires int64 // the node's monotonic ns
}

// Fallback is the node's fallback mode as the slots see it (DESIGN 5 for
// slots): slots granted from the node's fraction of the caps while it has
// lost its leader.
type Fallback interface {
	// Active reports whether the node serves its callers from its
	// fallback now rather than asking the leader.
	Active() bool
	// Acquire grants slot id on every key from the node's fraction, or
	// returns the full keys with ErrConcurrencyLimit, or wire.ErrNotLeader
	// when the node is back in raft mode.
	Acquire(id string, keys []string, ttl time.Duration) (raftpace.Slot, []string, error)
	// Release gives back a slot Acquire granted.
	Release(id string)
	// InUse counts the fallback slots held per key.
	InUse(now int64) map[string]int
}

// Counters are the node's counters of slot outcomes.
type Counters struct {
	Acquired, Refused, Released, Expired *atomic.Uint64
}

// Slots is one node's side of the concurrency caps. Build it with New.
type Slots struct {
	d     Deps
	mu    sync.Mutex // leader: serialises slot grants against the caps
	seq   atomic.Uint64
	nonce string
}

// New returns the slots of a node.
func New(d Deps) *Slots {
	// Slot IDs must not repeat across restarts of this node: a fresh
	// nonce per start, then a counter.
	return &Slots{d: d, nonce: newNonce()}
}

// LocalPrefix marks the IDs of slots granted in fallback.
const LocalPrefix = "local."

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (s *Slots) newID(prefix string) string {
	return fmt.Sprintf("%s%s.%d", prefix, s.nonce, s.seq.Add(1))
}

func (s *Slots) closed() bool { return s.d.Ctx.Err() != nil }

// CheckKeys validates keys (1..fsm.MaxSlotKeys distinct valid keys) and
// returns them sorted, so equal requests encode equally.
func CheckKeys(keys []string) ([]string, error) {
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
