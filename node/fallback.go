package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/internal/pgstore"
	"github.com/raftpace/raftpace/node/wire"
)

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

// The pool registration outlives its last renewal by poolTTL; a pooled
// reservation waits at most poolMaxWait. So the pool's grants that count a
// member's fraction end by (last renewal answer + poolTTL + poolMaxWait +
// UseGrace): the member hands its fraction to the leader, or paces it
// locally, only after that.
const (
	poolTTL     = 3 * time.Second
	poolMaxWait = time.Second
)

// errPoolPending: the node is deciding between pooled and local fallback
// (or rejoining the pool); the caller retries shortly.
var errPoolPending = errors.New("node: fallback pool pending")

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

// fallback is a node's member side of DESIGN 5: its promise to the leader,
// its mode, and the local pacer it uses when no leader holds its share.
type fallback struct {
	n    *Node
	mode atomic.Int32

	mu sync.Mutex
	// promise: no fallback before this (node clock, s + ShareTTL). Written
	// under mu, read without it by current() on every reservation.
	promise  atomic.Int64
	since    int64            // fallback began
	keys     map[string]int64 // local pacer TAT per key
	lastSlot int64            // latest fallback slot granted
	// poolUntil bounds the pool's grants that count this node's fraction
	// (see poolTTL); localFrom is when local pacing may start after the
	// pool was lost. pending: fallback began and the pool is being tried.
	poolUntil int64
	localFrom int64
	pending   bool
	lastTry   int64 // last attempt to (re)join the pool from local pacing
	fraction  func() float64
	announced Mode
	// joining counts JoinPool calls in flight (tendPool).
	joining int
	// slots granted in fallback from this node's fraction of each cap
	// (slots.go); slotEnd is when the last of them ends.
	slots   map[string]localSlot
	slotEnd int64
	// departed: the node is leaving the cluster (Leave); it never spends
	// its fraction again.
	departed bool

	// With the witness (Config.witnessed): licence is when this node's
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

func newFallback(n *Node) *fallback {
	fb := &fallback{n: n, keys: make(map[string]int64)}
	// A node spends a fallback fraction only once a leader has renewed its
	// share since it started: the fraction in a restarted node's data dir
	// may be one it handed back (it left, or was reaped or fenced, and the
	// leader already shares it out) and has not yet seen taken away.
	fb.fraction = func() float64 {
		if !fb.renewedOnce.Load() {
			return 0
		}
		return n.ownFraction()
	}
	if n.cfg.Unsafe.FallbackFullRate {
		fb.fraction = func() float64 { return 1 }
	}
	// Before a crash this node may have promised a leader no fallback until
	// ShareTTL after its last renewal, and that leader may still count its
	// share: a starting node keeps the promise as if renewed just now.
	fb.promise.Store(n.now() + int64(n.cfg.ShareTTL))
	fb.mode.Store(int32(ModeRaft))
	fb.announced = ModeRaft
	return fb
}

// current returns the node's mode, moving it along when a deadline passed:
// raft -> local when the promise expired, local -> stopped after FallbackFor.
func (fb *fallback) current() Mode {
	now := fb.n.now()
	m := Mode(fb.mode.Load())
	switch {
	case m == ModeRaft && now < fb.promiseAt():
		return ModeRaft
	case (m == ModeLocal || m == ModePooled) && now < fb.promiseAt()+int64(fb.n.cfg.FallbackFor):
		return m
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.advanceLocked(now)
}

func (fb *fallback) promiseAt() int64 { return fb.promise.Load() }

func (fb *fallback) advanceLocked(now int64) Mode {
	if fb.departed {
		return ModeStopped
	}
	m := Mode(fb.mode.Load())
	if m == ModeRaft && now >= fb.promiseAt() {
		m = ModeLocal
		fb.since = now
		clear(fb.keys) // each key starts with an empty bucket: no burst
		// With Postgres configured, try the pool first (watch decides);
		// admit nothing locally meanwhile, or the pool and the local pacer
		// could both spend the fraction.
		fb.pending = fb.n.pg != nil
	}
	switch {
	case fb.n.cfg.witnessed():
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
	case (m == ModeLocal || m == ModePooled) && now >= fb.promiseAt()+int64(fb.n.cfg.FallbackFor):
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

func (fb *fallback) announce(m Mode) {
	prev := fb.announced
	fb.announced = m
	switch m {
	case ModeLocal:
		fb.n.log.Warn("no leader renewed this node's share: pacing locally at its fallback fraction",
			"from", prev.String(), "fraction", fb.fraction(), "stop_after", fb.n.cfg.FallbackFor)
	case ModeStopped:
		switch {
		case fb.departed:
			fb.n.log.Info("leaving the cluster: this node spends no fallback fraction any more", "from", prev.String())
		case fb.n.cfg.witnessed():
			fb.n.log.Error("cut off from the leader and from postgres (the witness) for longer than the witness licence: admitting nothing until one of them is back",
				"from", prev.String(), "witness_ttl", fb.n.cfg.WitnessTTL, "fenced", fb.fenced.Load())
		default:
			fb.n.log.Error("fallback budget exhausted: admitting nothing until a leader renews this node's share",
				"from", prev.String(), "in_fallback_for", fb.n.cfg.FallbackFor)
		}
	case ModeRaft:
		fb.n.log.Info("share renewed by the leader: admitting through raft", "from", prev.String())
	case ModePooled:
		fb.n.log.Warn("no leader renewed this node's share: pooling its fallback fraction in postgres",
			"from", prev.String(), "fraction", fb.fraction(), "stop_after", fb.n.cfg.FallbackFor)
	}
}

// renew answers a leader's renewal: no fallback before now + ShareTTL. A
// node in fallback stops granting from it at once and reports how far its
// fallback slots still reach (plus the grace to use them).
func (fb *fallback) renew() wire.ShareAnswer {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.n.now()
	var busy int64
	if m := Mode(fb.mode.Load()); m != ModeRaft || now >= fb.promiseAt() {
		poolEnd := fb.poolUntil
		if m == ModePooled {
			poolEnd = fb.leavePoolNow(poolEnd)
		}
		end := max(fb.lastSlot+int64(fb.n.cfg.UseGrace), poolEnd, fb.slotEnd)
		if end > now {
			busy = end - now
		}
		fb.pending = false
	}
	fb.promise.Store(now + int64(fb.n.cfg.ShareTTL))
	fb.renewedOnce.Store(true)
	if !fb.departed {
		fb.mode.Store(int32(ModeRaft))
		if fb.announced != ModeRaft {
			fb.announce(ModeRaft)
		}
	}
	// Report the committed fraction: the leader counts an unheld member at
	// the larger of committed and reported.
	return wire.ShareAnswer{Applied: fb.n.state.AppliedIndex(), Fraction: fb.n.ownFraction(), Busy: time.Duration(busy), Fenced: fb.fenced.Load(), Departing: fb.departed}
}

// depart stops this node's fallback for good (it is leaving the cluster)
// and returns how far past now its own fallback slots, and the pool's
// grants that counted its fraction, may still reach: the leader counts the
// fraction from the arrival of the leave request plus that.
func (fb *fallback) depart() time.Duration {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.n.now()
	m := Mode(fb.mode.Load())
	var end int64
	if m != ModeRaft || now >= fb.promiseAt() {
		end = max(fb.lastSlot+int64(fb.n.cfg.UseGrace), fb.poolUntil, fb.slotEnd)
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

// undepart undoes depart after a Leave that failed: the node stays a
// member and admits again (through its leader, or its fallback once its
// promise runs out).
func (fb *fallback) undepart() {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.departed = false
	fb.mode.Store(int32(ModeRaft))
	fb.advanceLocked(fb.n.now())
}

// heartbeatLoop runs with the witness: every WitnessTTL/3 it tells Postgres
// this node is alive and learns whether a leader fenced it. A heartbeat sent
// at q and accepted unfenced licenses local pacing until q + WitnessTTL:
// Postgres recorded it at some p >= q, and a leader fencing this node waits
// until p + WitnessTTL, measured from after the fence on Postgres's clock.
func (fb *fallback) heartbeatLoop(ctx context.Context) {
	every := fb.n.cfg.WitnessTTL / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		sent := fb.n.now()
		cctx, cancel := context.WithTimeout(ctx, every)
		fenced, err := fb.n.pg.heartbeat(cctx, fb.n.cfg.NodeID)
		cancel()
		if err == nil {
			fb.heard(sent, fenced)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// heard records a heartbeat sent at sent that Postgres answered.
func (fb *fallback) heard(sent int64, fenced bool) {
	if fenced {
		fb.licence.Store(0)
		if !fb.fenced.Swap(true) {
			fb.n.log.Error("a leader fenced this member in postgres (it was silent): it spends no fallback fraction until a leader renews its share and lifts the fence")
		}
		return
	}
	if fb.fenced.Swap(false) {
		fb.n.log.Info("the fence on this member in postgres was lifted")
	}
	if l := sent + int64(fb.n.cfg.WitnessTTL); l > fb.licence.Load() {
		fb.licence.Store(l)
	}
}

// reserve paces count events of key locally at this node's fraction of
// the key's rate, with its share of the burst (at least one).
func (fb *fallback) reserve(key string, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	lim, ok := fb.n.state.Limit(key)
	if !ok {
		// This node may not have applied the limit yet: only the leader
		// can say the key is unknown. If no leader answers, the caller
		// gets ErrNoLeader; fallback never admits a key it has no rate for.
		return raftpace.Reservation{}, wire.ErrNotLeader
	}
	fb.mu.Lock()
	now := fb.n.now()
	m := fb.advanceLocked(now)
	switch {
	case m == ModeStopped:
		fb.mu.Unlock()
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w", key, raftpace.ErrStopped)
	case m == ModeRaft:
		fb.mu.Unlock()
		return raftpace.Reservation{}, wire.ErrNotLeader // back in raft mode: go through the leader
	case fb.pending:
		fb.mu.Unlock()
		return raftpace.Reservation{}, errPoolPending
	case m == ModePooled:
		fb.mu.Unlock()
		return fb.reservePooled(key, lim, count, maxWait)
	}
	defer fb.mu.Unlock()
	f := fb.fraction()
	if f <= 0 {
		// No fraction of its own (a new member): only the leader's grants
		// can serve it, and those are always safe to use.
		return raftpace.Reservation{}, wire.ErrNotLeader
	}
	burst := max(1, int(math.Floor(f*float64(lim.Burst))))
	interval := int64(math.Ceil(float64(lim.Interval()) / f))
	p := gcra.NewParams(interval, burst)
	tat, ok := fb.keys[key]
	if !ok {
		tat = now
	}
	// After the pool was lost, nothing before the pool's grants that
	// counted this fraction are surely over.
	tat = max(tat, fb.localFrom+p.Tolerance)
	start, next, err := gcra.Reserve(tat, p, now, count)
	if err != nil {
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
	}
	if lic := fb.licence.Load(); fb.n.cfg.witnessed() && start >= lic {
		// A leader may count this fraction from the licence's end on.
		return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: cut off from the leader and from postgres; local pacing is licensed only until %v after the last heartbeat postgres accepted",
			key, raftpace.ErrStopped, fb.n.cfg.WitnessTTL)
	}
	if time.Duration(start-now) > maxWait {
		return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: time.Duration(start - now), MaxWait: maxWait}
	}
	fb.keys[key] = next
	fb.lastSlot = max(fb.lastSlot, start)
	at := fb.n.epoch.Add(time.Duration(start))
	return raftpace.Reservation{At: at, UseBy: at.Add(fb.n.cfg.UseGrace)}, nil
}

// watch moves the mode along on time, so transitions are logged when they
// happen rather than at the next reservation.
func (fb *fallback) watch(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if fb.current() != ModeRaft && fb.n.pg != nil {
				fb.tendPool(ctx)
			}
		}
	}
}

// ownFraction is this node's committed fallback fraction.
func (n *Node) ownFraction() float64 {
	for _, m := range n.state.Members() {
		if m.ID == n.cfg.NodeID {
			return m.Fraction
		}
	}
	return 0
}

// tendPool decides pooled or local fallback and renews the registration:
// joining when the fallback begins (or the pool was lost), renewing every
// poolTTL/3, going local when Postgres fails.
func (fb *fallback) tendPool(ctx context.Context) {
	fb.mu.Lock()
	m := Mode(fb.mode.Load())
	now := fb.n.now()
	retry := m == ModeLocal || (m == ModeStopped && fb.n.cfg.witnessed() && !fb.departed)
	if retry && !fb.pending && fb.n.pg.reachable() && now-fb.lastTry > int64(5*time.Second) {
		// Postgres is back: rejoin the pool. Stop granting locally first;
		// join only once the local slots are past their use-by, or the
		// pool and this node would both spend the fraction.
		fb.lastTry = now
		fb.pending = true
	}
	if m == ModeLocal && fb.pending && now < fb.lastSlot+int64(fb.n.cfg.UseGrace) {
		fb.mu.Unlock()
		return // local slots still in use: join at a later tick
	}
	due := fb.pending || (m == ModePooled && now > fb.poolUntil-int64(poolMaxWait)-int64(fb.n.cfg.UseGrace)-int64(poolTTL)*2/3)
	if !due || !fb.poolable(m) {
		fb.mu.Unlock()
		return
	}
	// Counted under the lock that decided it, so a renewal that leaves
	// the pool meanwhile knows this join may register again (leavePoolNow).
	fb.joining++
	fb.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	err := fb.n.pg.joinPool(cctx, fb.n.cfg.NodeID, fb.fraction())
	recv := fb.n.now()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.joining--
	m = Mode(fb.mode.Load())
	if !fb.poolable(m) {
		return // a renewal or the budget moved it meanwhile
	}
	if errors.Is(err, pgstore.ErrFenced) {
		fb.licence.Store(0)
		if !fb.fenced.Swap(true) {
			fb.n.log.Error("a leader fenced this member in postgres: the pool refuses it; it spends no fallback fraction until a leader renews its share")
		}
	}
	if err == nil {
		fb.poolUntil = recv + int64(poolTTL) + int64(poolMaxWait) + int64(fb.n.cfg.UseGrace)
		fb.pending = false
		if m != ModePooled {
			fb.mode.Store(int32(ModePooled))
			fb.announce(ModePooled)
		}
		return
	}
	if !fb.poolExpiringLocked(recv) {
		return // still registered for a while: retry at the next tick
	}
	fb.poolLostLocked(err)
}

// poolable reports whether a node in mode m may (re)join the pool.
func (fb *fallback) poolable(m Mode) bool {
	if fb.departed {
		return false
	}
	return m == ModeLocal || m == ModePooled || (m == ModeStopped && fb.n.cfg.witnessed())
}

// poolExpiringLocked reports whether the registration is gone or within a
// third of its TTL of expiring. Before that, a failed call to Postgres is
// retried instead of giving up the pool.
func (fb *fallback) poolExpiringLocked(now int64) bool {
	if Mode(fb.mode.Load()) != ModePooled {
		return true
	}
	regExpiry := fb.poolUntil - int64(poolMaxWait) - int64(fb.n.cfg.UseGrace)
	return now >= regExpiry-int64(poolTTL)/3
}

// poolLostLocked moves a pooled (or pending) node to local pacing, which
// may start only once the pool's grants counting its fraction are over.
func (fb *fallback) poolLostLocked(err error) {
	fb.localFrom = max(fb.localFrom, fb.poolUntil)
	fb.pending = false
	if Mode(fb.mode.Load()) != ModeLocal || fb.announced != ModeLocal {
		fb.mode.Store(int32(ModeLocal))
		// With the witness, local pacing needs a live licence: advance may
		// stop the node instead (and says so).
		if fb.advanceLocked(fb.n.now()) == ModeLocal {
			fb.n.log.Warn("postgres pool unavailable: pacing the fallback fraction locally", "err", err,
				"local_from_in", time.Duration(max(0, fb.localFrom-fb.n.now())))
		}
	}
}

// reservePooled reserves from the pool's cursor.
func (fb *fallback) reservePooled(key string, lim fsm.Limit, count int, maxWait time.Duration) (raftpace.Reservation, error) {
	ctx, cancel := context.WithTimeout(fb.n.ctx, 2*time.Second)
	defer cancel()
	sent := fb.n.now()
	wait, err := fb.n.pg.reservePooled(ctx, key, lim, count, min(maxWait, poolMaxWait))
	recv := fb.n.now()
	if err != nil {
		var le *pgstore.LimitExceededError
		switch {
		case errors.As(err, &le):
			return raftpace.Reservation{}, &raftpace.LimitExceededError{Key: key, Wait: le.Wait, MaxWait: maxWait}
		case errors.Is(err, pgstore.ErrNotInPool):
			fb.mu.Lock()
			fb.pending = true // rejoin at the next tick
			fb.mu.Unlock()
			return raftpace.Reservation{}, errPoolPending
		case errors.Is(err, pgstore.ErrInvalid):
			return raftpace.Reservation{}, fmt.Errorf("node: reserve %q: %w: %w", key, raftpace.ErrInvalidRequest, err)
		default:
			fb.mu.Lock()
			if fb.poolExpiringLocked(recv) {
				fb.poolLostLocked(err)
			}
			fb.mu.Unlock()
			return raftpace.Reservation{}, errPoolPending
		}
	}
	if recv-sent > int64(fb.n.cfg.UseGrace) {
		return raftpace.Reservation{}, errPoolPending // arrived too late to use: ask again
	}
	fb.mu.Lock()
	fb.lastSlot = max(fb.lastSlot, recv+int64(wait))
	fb.mu.Unlock()
	at := fb.n.epoch.Add(time.Duration(recv) + wait)
	return raftpace.Reservation{At: at, UseBy: fb.n.epoch.Add(time.Duration(sent) + wait + fb.n.cfg.UseGrace)}, nil
}

// joinTimeout bounds one JoinPool call (and so how long after it was sent
// a registration it makes can start).
const joinTimeout = time.Second

// leavePoolNow leaves the pool on the way back to raft and returns when
// the pool's grants that counted this node's fraction end (node clock):
// LeavePool deletes the registration after every reservation that counted
// it, and reports how far the pool's cursors reach, so they end by its
// answer plus that plus UseGrace, usually well before the registration's
// TTL (fallback returns otherwise: ttlEnd). The caller holds fb.mu; the
// call is bounded by a sixth of ShareTTL, inside the leader's wait for the
// renewal answer. A JoinPool in flight could register again after the
// delete: then the TTL rule stands, from the latest such registration.
func (fb *fallback) leavePoolNow(ttlEnd int64) int64 {
	n := fb.n
	if fb.joining > 0 {
		fb.leavePoolAsync()
		return max(ttlEnd, n.now()+int64(joinTimeout+poolTTL+poolMaxWait+n.cfg.UseGrace))
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ShareTTL/6)
	defer cancel()
	busy, err := n.pg.leavePoolBusy(ctx, n.cfg.NodeID)
	if err != nil {
		n.log.Debug("leave pool", "err", err)
		fb.leavePoolAsync()
		return ttlEnd
	}
	return n.now() + int64(busy+n.cfg.UseGrace)
}

// leavePoolAsync removes the registration (best effort: it expires anyway).
func (fb *fallback) leavePoolAsync() {
	n := fb.n
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
		defer cancel()
		if err := n.pg.leavePool(ctx, n.cfg.NodeID); err != nil {
			n.log.Debug("leave pool", "err", err)
		}
	}()
}

// acquireSlots grants a slot on every key from this node's fraction of
// their caps, if the node is in fallback, has been for MaxSlotTTL (every
// slot the leader granted before this node's share lapsed has expired), and
// each key has room. The slot ends by the time fallback stops. ErrNotLeader:
// back in raft mode. ErrConcurrencyLimit: no room (yet); the caller waits.
func (fb *fallback) acquireSlots(id string, keys []string, ttl time.Duration) (raftpace.Slot, []string, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	now := fb.n.now()
	switch fb.advanceLocked(now) {
	case ModeRaft:
		return raftpace.Slot{}, nil, wire.ErrNotLeader
	case ModeStopped:
		return raftpace.Slot{}, nil, fmt.Errorf("node: acquire slots %q: %w", keys, raftpace.ErrStopped)
	}
	if from := fb.since + int64(fb.n.cfg.MaxSlotTTL); now < from {
		return raftpace.Slot{}, keys, fmt.Errorf("%w: in fallback, this node grants slots from its fraction of the caps only from %v after losing its leader (Config.MaxSlotTTL), %v from now",
			raftpace.ErrConcurrencyLimit, fb.n.cfg.MaxSlotTTL, time.Duration(from-now).Round(time.Millisecond))
	}
	f := fb.fraction()
	var full []string
	for _, key := range keys {
		c, ok := fb.n.state.Cap(key)
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
	end := min(now+int64(ttl), fb.promiseAt()+int64(fb.n.cfg.FallbackFor))
	if fb.n.cfg.witnessed() {
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
	return raftpace.Slot{ID: id, Keys: keys, Deadline: fb.n.epoch.Add(time.Duration(end))}, nil, nil
}

// releaseSlot gives back a fallback slot. slotEnd stays: the leader keeps
// this node's floor free until then, which only under-admits.
func (fb *fallback) releaseSlot(id string) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	delete(fb.slots, id)
}

// localSlotsInUse counts the fallback slots held per key.
func (fb *fallback) localSlotsInUse(now int64) map[string]int {
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
