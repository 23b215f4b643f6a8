package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
	"github.com/raftpace/raftpace/node/wire"
)

// Config is the node's configuration as its fallback reads it (the node's
// Config, fixed once the node is built).
type Config struct {
	NodeID      string        // this node: its pool registration and heartbeat
	ShareTTL    time.Duration // the promise a renewal answer makes
	FallbackFor time.Duration // local (or pooled) pacing before stopping, without the witness
	UseGrace    time.Duration // how long after its time a reservation may be used
	MaxSlotTTL  time.Duration // no fallback slot before this long into fallback
	WitnessTTL  time.Duration // a heartbeat's licence, with the witness
	// Witnessed: Postgres is every member's fallback witness (DESIGN 9;
	// the node's Config.witnessed).
	Witnessed bool
	// FullRate: Unsafe.FallbackFullRate, pace at the key's full rate (a
	// test option that breaks the ceiling).
	FullRate bool
}

// State is the replicated state as this node applied it (a *fsm.State).
type State interface {
	Limit(key string) (fsm.Limit, bool)
	Limits() map[string]fsm.Limit // every limit and template
	Cap(key string) (int, bool)
	AppliedIndex() uint64
}

// Pool is the node's link to Postgres (node/pglink) as the fallback
// calls it: the pooled fallback and the witness's heartbeat. Each call is
// bounded by its ctx; the errors are pgstore's (ErrFenced, ErrNotInPool,
// ErrInvalid, *LimitExceededError) or the connection's.
type Pool struct {
	// Reachable: the last call to Postgres succeeded.
	Reachable func() bool
	// Join registers (or renews) id in the pool with its fraction.
	Join func(ctx context.Context, id string, fraction float64) error
	// LeaveBusy deletes id's registration and returns how far the pool's
	// cursors reach past the answer.
	LeaveBusy func(ctx context.Context, id string) (time.Duration, error)
	// Reserve reserves every want on the pool's cursors at one instant
	// and returns the wait from the answer.
	Reserve func(ctx context.Context, wants []PoolWant, maxWait time.Duration) (time.Duration, error)
	// Heartbeat tells the witness id is alive; fenced: a leader fenced it.
	Heartbeat func(ctx context.Context, id string) (fenced bool, err error)
}

// PoolWant is one key of a pooled reservation (pgstore's).
type PoolWant = pgstore.PoolWant

// Deps is what a Fallback is given by its node instead of the node.
type Deps struct {
	Now   func() int64 // the node's monotonic clock, in nanoseconds since Epoch
	Epoch time.Time    // the node's clock's zero, for the times it returns
	Log   *slog.Logger // the node's: the fallback's lines read as the node's
	// State is the limits, caps and applied index as this node applied them.
	State State
	// Fraction is this node's committed fallback fraction (the replicated
	// member list as this node applied it).
	Fraction func() float64
	// Pool is the node's Postgres link; nil without Postgres.
	Pool *Pool
	// Ctx is the node's lifetime: it bounds the calls to Postgres made
	// outside a loop. WG counts the goroutines the fallback starts (a best
	// effort leave of the pool); the node waits for them when it closes.
	Ctx context.Context
	WG  *sync.WaitGroup
}

// Mode is how a node admits events.
type Mode int32

const (
	// ModeRaft: the node holds a share promise to a leader; its callers are
	// served from the leader's grants.
	ModeRaft Mode = iota
	// ModeLocal: no leader renewed its share within ShareTTL; the node paces
	// its own callers at its fallback fraction of each key's rate.
	ModeLocal
	// ModeStopped: the node was in fallback for FallbackFor; it admits
	// nothing until a leader renews its share (so a member that may be
	// reaped has stopped spending its fraction before it is).
	ModeStopped
	// ModePooled: in fallback, with Postgres reachable: the node's fraction
	// is pooled with the other members in fallback that reach it, on one
	// cursor per key kept by Postgres's clock.
	ModePooled
)

// ErrPoolPending: the node is deciding between pooled and local fallback
// (or rejoining the pool); the caller retries shortly.
var ErrPoolPending = errors.New("node: fallback pool pending")

func (m Mode) String() string {
	switch m {
	case ModeRaft:
		return "raft"
	case ModeLocal:
		return "local"
	case ModeStopped:
		return "stopped"
	case ModePooled:
		return "pooled"
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// Fallback is a node's member side of DESIGN 5: its promise to the leader,
// its mode, and the local pacer it uses when no leader holds its share.
// Build it with New.
type Fallback struct {
	cfg  Config
	d    Deps
	mode atomic.Int32

	mu sync.Mutex
	// promise: no fallback before this (node clock, s + ShareTTL). Written
	// under mu, read without it by Current() on every reservation.
	promise atomic.Int64
	since   int64 // fallback began
	// lapsed is when the promise that ended the last fallback's raft mode
	// ran out: a leader's grants may claim each key's rate up to
	// wire.ShareOverrun past it, so local pacing of a key starts no
	// earlier than that (local.go), and the pool is joined only once the
	// longest of them is over (poolFrom).
	lapsed   int64
	poolFrom int64
	keys     map[string]int64 // local pacer TAT per key
	lastSlot int64            // latest fallback slot granted
	// poolUntil bounds the pool's grants that count this node's fraction
	// (see PoolTTL); localFrom is when local pacing may start after the
	// pool was lost. pending: fallback began and the pool is being tried.
	poolUntil int64
	localFrom int64
	pending   bool
	lastTry   int64 // last attempt to (re)join the pool from local pacing
	fraction  func() float64
	announced Mode
	// joining counts JoinPool calls in flight (tendPool), joins those
	// ever started: a pool leave shortens poolUntil only if no join
	// overlapped it (leavePoolAsync).
	joining int
	joins   uint64
	// slots granted in fallback from this node's fraction of each cap
	// (slots.go); slotEnd is when the last of them ends.
	slots   map[string]localSlot
	slotEnd int64
	// departed: the node is leaving the cluster (Leave); it never spends
	// its fraction again.
	departed bool

	// With the witness (Config.Witnessed): licence is when this node's
	// right to pace locally ends (node clock: the send time of its last
	// heartbeat Postgres accepted unfenced, plus WitnessTTL; 0: none), and
	// fenced says Postgres reported that a leader fenced it. Written by the
	// heartbeat loop only.
	licence atomic.Int64
	fenced  atomic.Bool
	// renewedOnce: a leader renewed this node's share since it started.
	renewedOnce atomic.Bool
}

type localSlot struct {
	keys    []string
	expires int64
}

// New returns a node's fallback, in mode raft, keeping the promise a
// starting node makes (see below). It starts no goroutine: the node runs
// Watch, and HeartbeatLoop with the witness.
func New(cfg Config, d Deps) *Fallback {
	fb := &Fallback{cfg: cfg, d: d, keys: make(map[string]int64)}
	// A node spends a fallback fraction only once a leader has renewed its
	// share since it started: the fraction in a restarted node's data dir
	// may be one it handed back (it left, or was reaped or fenced, and the
	// leader already shares it out) and has not yet seen taken away.
	fb.fraction = func() float64 {
		if !fb.renewedOnce.Load() {
			return 0
		}
		return d.Fraction()
	}
	if cfg.FullRate {
		fb.fraction = func() float64 { return 1 }
	}
	// Before a crash this node may have promised a leader no fallback until
	// ShareTTL after its last renewal, and that leader may still count its
	// share: a starting node keeps the promise as if renewed just now.
	fb.promise.Store(d.Now() + int64(cfg.ShareTTL))
	fb.mode.Store(int32(ModeRaft))
	fb.announced = ModeRaft
	return fb
}

// Current returns the node's mode, moving it along when a deadline passed:
// raft -> local when the promise expired, local -> stopped after FallbackFor.
func (fb *Fallback) Current() Mode {
	now := fb.d.Now()
	m := Mode(fb.mode.Load())
	switch {
	case m == ModeRaft && now < fb.promiseAt():
		return ModeRaft
	case (m == ModeLocal || m == ModePooled) && now < fb.promiseAt()+int64(fb.cfg.FallbackFor):
		return m
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.advanceLocked(now)
}

func (fb *Fallback) promiseAt() int64 { return fb.promise.Load() }

func (fb *Fallback) advanceLocked(now int64) Mode {
	if fb.departed {
		return ModeStopped
	}
	m := Mode(fb.mode.Load())
	if m == ModeRaft && now >= fb.promiseAt() {
		m = ModeLocal
		fb.since = now
		fb.lapsed = fb.promiseAt()
		clear(fb.keys) // each key starts afresh (local.go: after its overrun)
		// With Postgres configured, try the pool first (watch decides);
		// admit nothing locally meanwhile, or the pool and the local pacer
		// could both spend the fraction. The pool paces every key at once,
		// so a slow key's overrun defers the whole pool: local pacing
		// until then.
		fb.poolFrom = fb.lapsed + fb.longestOverrun()
		fb.pending = fb.d.Pool != nil && now >= fb.poolFrom
	}
	switch {
	case fb.cfg.Witnessed:
		// The witness decides (DESIGN 9): pooled for as long as the pool
		// holds (tendPool moves a node that loses it to local), local only
		// within the licence of its last heartbeat, stopped otherwise until
		// the licence or the pool is back. No FallbackFor: the leader never
		// takes this fraction back without fencing it in Postgres first.
		lic := fb.licence.Load()
		switch {
		case m == ModeLocal && !fb.pending && now >= lic:
			m = ModeStopped
		case m == ModeStopped && now < lic:
			m = ModeLocal
		}
	case (m == ModeLocal || m == ModePooled) && now >= fb.promiseAt()+int64(fb.cfg.FallbackFor):
		if m == ModePooled {
			fb.leavePoolAsync()
		}
		m = ModeStopped
	}
	fb.mode.Store(int32(m))
	if m != fb.announced {
		fb.announce(m)
	}
	return m
}

func (fb *Fallback) announce(m Mode, attrs ...any) {
	prev := fb.announced
	fb.announced = m
	switch m {
	case ModeLocal:
		fb.d.Log.Warn("no leader renewed this node's share: pacing locally at its fallback fraction",
			"from", prev.String(), "fraction", fb.fraction(), "stop_after", fb.cfg.FallbackFor)
	case ModeStopped:
		switch {
		case fb.departed:
			fb.d.Log.Info("leaving the cluster: this node spends no fallback fraction any more", "from", prev.String())
		case fb.cfg.Witnessed:
			fb.d.Log.Error("cut off from the leader and from postgres (the witness) for longer than the witness licence: admitting nothing until one of them is back",
				"from", prev.String(), "witness_ttl", fb.cfg.WitnessTTL, "fenced", fb.fenced.Load())
		default:
			fb.d.Log.Error("fallback budget exhausted: admitting nothing until a leader renews this node's share",
				"from", prev.String(), "in_fallback_for", fb.cfg.FallbackFor)
		}
	case ModeRaft:
		fb.d.Log.Info("share renewed by the leader: admitting through raft", append([]any{"from", prev.String()}, attrs...)...)
	case ModePooled:
		fb.d.Log.Warn("no leader renewed this node's share: pooling its fallback fraction in postgres",
			"from", prev.String(), "fraction", fb.fraction(), "stop_after", fb.cfg.FallbackFor)
	}
}

// overrun is how long after the promise lapsed a key of limit lim may
// still be claimed by a leader's grants (wire.ShareOverrun at this node's
// interval for it: never shorter than the leader's while it held the
// share); f is the node's fraction.
func (fb *Fallback) overrun(lim fsm.Limit, f float64) int64 {
	if f <= 0 {
		return 0
	}
	interval := time.Duration(math.Ceil(float64(lim.Interval()) / f))
	return int64(wire.ShareOverrun(interval, fb.cfg.ShareTTL))
}

// longestOverrun is the largest overrun of every limit this node applied.
// Zero unless a key is slower than about one event per ShareTTL/3 of this
// node's fraction.
func (fb *Fallback) longestOverrun() int64 {
	f := fb.fraction()
	var most int64
	for _, lim := range fb.d.State.Limits() {
		most = max(most, fb.overrun(lim, f))
	}
	return most
}

// Renew answers a leader's renewal: no fallback before now + ShareTTL. A
// node in fallback stops granting from it at once and reports how far its
// fallback slots still reach (plus the grace to use them).
func (fb *Fallback) Renew() wire.ShareAnswer {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.d.Now()
	if m := Mode(fb.mode.Load()); m != ModeRaft || now >= fb.promiseAt() {
		if m == ModePooled {
			fb.leavePoolNow()
		}
		fb.pending = false
	}
	// Every answer reports the reach, not only the first after a fallback:
	// a pool leave that did not answer in time reports the registration's
	// TTL first, and the exact reach at the next renewal once it did
	// (leavePoolAsync), so the leader counts the share from then on.
	busy := time.Duration(max(0, fb.reachLocked()-now))
	fb.promise.Store(now + int64(fb.cfg.ShareTTL))
	fb.renewedOnce.Store(true)
	if !fb.departed {
		fb.mode.Store(int32(ModeRaft))
		if fb.announced != ModeRaft {
			fb.announce(ModeRaft, "fallback_busy", busy)
		}
	}
	// Report the committed fraction: the leader counts an unheld member at
	// the larger of committed and reported.
	return wire.ShareAnswer{Applied: fb.d.State.AppliedIndex(), Fraction: fb.d.Fraction(), Busy: busy, Fenced: fb.fenced.Load(), Departing: fb.departed}
}

// reachLocked returns when the grants this node made from its fallback
// fraction end, use included: its local slots plus UseGrace, the pool's
// grants that counted it, its fallback concurrency slots. In the past
// once a fallback is over.
func (fb *Fallback) reachLocked() int64 {
	return max(fb.lastSlot+int64(fb.cfg.UseGrace), fb.poolUntil, fb.slotEnd)
}

// Depart stops this node's fallback for good (it is leaving the cluster)
// and returns how far past now its own fallback slots, and the pool's
// grants that counted its fraction, may still reach: the leader counts the
// fraction from the arrival of the leave request plus that.
func (fb *Fallback) Depart() time.Duration {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.d.Now()
	m := Mode(fb.mode.Load())
	var end int64
	if m != ModeRaft || now >= fb.promiseAt() {
		end = fb.reachLocked()
		if m == ModePooled {
			fb.leavePoolAsync()
		}
	}
	fb.departed = true
	fb.pending = false
	fb.mode.Store(int32(ModeStopped))
	fb.announce(ModeStopped)
	return time.Duration(max(0, end-now))
}

// Undepart undoes Depart after a Leave that failed: the node stays a
// member and admits again (through its leader, or its fallback once its
// promise runs out).
func (fb *Fallback) Undepart() {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.departed = false
	fb.mode.Store(int32(ModeRaft))
	fb.advanceLocked(fb.d.Now())
}
