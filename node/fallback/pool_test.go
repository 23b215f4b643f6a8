package fallback

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// fakePool stands for the node's Postgres link.
type fakePool struct {
	mu         sync.Mutex
	reachable  bool
	joinErr    error
	joins      []float64 // the fractions joined with
	leaves     int
	leaveBusy  time.Duration
	leaveFail  int           // how many of the next leaves fail
	joinGate   chan struct{} // when set, a join waits for it
	leaveGate  chan struct{} // when set, a leave that does not fail waits for it
	reserveErr error
	wait       time.Duration // a pooled reservation's wait
	maxWaits   []time.Duration
	onReserve  func() // runs during a pooled reservation (the clock moves)
}

func (p *fakePool) pool() *Pool {
	return &Pool{
		Reachable: func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.reachable },
		Join: func(_ context.Context, id string, fraction float64) error {
			p.mu.Lock()
			gate := p.joinGate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			p.joins = append(p.joins, fraction)
			return p.joinErr
		},
		LeaveBusy: func(context.Context, string) (time.Duration, error) {
			p.mu.Lock()
			p.leaves++
			if p.leaveFail > 0 {
				p.leaveFail--
				p.mu.Unlock()
				return 0, errors.New("leave pool: timeout")
			}
			gate := p.leaveGate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.leaveBusy, nil
		},
		Reserve: func(_ context.Context, _ []pgstore.PoolWant, maxWait time.Duration) (time.Duration, error) {
			p.mu.Lock()
			p.maxWaits = append(p.maxWaits, maxWait)
			wait, err, on := p.wait, p.reserveErr, p.onReserve
			p.mu.Unlock()
			if on != nil {
				on()
			}
			return wait, err
		},
		Heartbeat: func(context.Context, string) (bool, error) { return false, nil },
	}
}

func (p *fakePool) set(f func(p *fakePool)) { p.mu.Lock(); f(p); p.mu.Unlock() }

func (p *fakePool) leaveCount() int { p.mu.Lock(); defer p.mu.Unlock(); return p.leaves }

func witnessed() Config {
	cfg := defaultConfig()
	cfg.Witnessed = true
	return cfg
}

// pooledAt builds a witnessed node with a pool, lapses it, licenses it by
// a heartbeat at t0 + ShareTTL and joins the pool there:
// poolUntil = t0 + 1s + 3s + 1s + 100ms.
func pooledAt(t *testing.T, cfg Config) (*harness, *fakePool) {
	t.Helper()
	fp := &fakePool{reachable: true}
	h := newHarness(t, cfg, fp.pool())
	h.lapsed()
	// Fallback began with Postgres configured: pending, admitting nothing.
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, ErrPoolPending) {
		t.Fatalf("reserve while deciding pooled or local: %v, want ErrPoolPending", err)
	}
	h.fb.heard(h.at(shareTTL), false)
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModePooled {
		t.Fatalf("after joining the pool: %s, want pooled", m)
	}
	if len(fp.joins) != 1 || fp.joins[0] != 0.25 {
		t.Fatalf("joins %v, want one with the fraction 0.25", fp.joins)
	}
	h.wantLog("pooling its fallback fraction in postgres")
	return h, fp
}

const poolUntil = shareTTL + PoolTTL + PoolMaxWait + useGrace // after pooledAt

// local -> pooled; pooled reservations come from the pool's cursor.
func TestPoolJoinAndReserve(t *testing.T) {
	h, fp := pooledAt(t, witnessed())
	fp.set(func(p *fakePool) { p.wait = 30 * time.Millisecond })
	sent := h.at(shareTTL + time.Millisecond)
	fp.set(func(p *fakePool) { p.onReserve = func() { h.clock.Add(int64(5 * time.Millisecond)) } })
	r, err := h.fb.ReserveAll(one("k", 1), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recv := sent + int64(5*time.Millisecond)
	if !r.At.Equal(epoch.Add(time.Duration(recv)+30*time.Millisecond)) || !r.UseBy.Equal(epoch.Add(time.Duration(sent)+30*time.Millisecond+useGrace)) {
		t.Fatalf("pooled reservation at %v use by %v", r.At, r.UseBy)
	}
	if fp.maxWaits[0] != PoolMaxWait {
		t.Fatalf("pool asked to wait up to %v, want at most PoolMaxWait", fp.maxWaits[0])
	}
	// An answer later than UseGrace is not used: ask again.
	fp.set(func(p *fakePool) { p.onReserve = func() { h.clock.Add(int64(useGrace) + 1) } })
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); !errors.Is(err, ErrPoolPending) {
		t.Fatalf("an answer later than UseGrace: %v, want ErrPoolPending", err)
	}
	fp.set(func(p *fakePool) { p.onReserve = nil })
	// The pool's refusals become the node's.
	fp.set(func(p *fakePool) { p.reserveErr = &pgstore.LimitExceededError{Key: "k", Wait: 3 * time.Second} })
	var le *raftpace.LimitExceededError
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); !errors.As(err, &le) || le.Wait != 3*time.Second || le.MaxWait != 2*time.Second {
		t.Fatalf("pool over its rate: %v", err)
	}
	fp.set(func(p *fakePool) { p.reserveErr = pgstore.ErrInvalid })
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Fatalf("pool says invalid: %v", err)
	}
	// Not registered any more: rejoin at the next tick.
	fp.set(func(p *fakePool) { p.reserveErr = pgstore.ErrNotInPool })
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); !errors.Is(err, ErrPoolPending) {
		t.Fatalf("not in the pool: %v, want ErrPoolPending", err)
	}
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); !errors.Is(err, ErrPoolPending) {
		t.Fatalf("pending rejoin: %v, want ErrPoolPending", err)
	}
	fp.set(func(p *fakePool) { p.reserveErr = nil })
	h.fb.tendPool(context.Background())
	if len(fp.joins) != 2 {
		t.Fatalf("joins %d, want a rejoin", len(fp.joins))
	}
	if _, err := h.fb.ReserveAll(one("k", 1), 2*time.Second); err != nil {
		t.Fatalf("after the rejoin: %v", err)
	}
}

// The registration is renewed from PoolTTL/3 after the join; a failed
// renewal is retried until the registration is within a third of its TTL
// of expiring; then pooled -> local, pacing only from the end of the
// pool's grants that counted the fraction.
func TestPoolLostToLocal(t *testing.T) {
	h, fp := pooledAt(t, witnessed())
	joinedAt := shareTTL
	h.at(joinedAt + PoolTTL/3) // not yet due
	h.fb.tendPool(context.Background())
	if len(fp.joins) != 1 {
		t.Fatalf("renewed the registration after %v: joins %d", PoolTTL/3, len(fp.joins))
	}
	h.at(joinedAt + PoolTTL/3 + time.Millisecond)
	h.fb.tendPool(context.Background())
	if len(fp.joins) != 2 {
		t.Fatalf("no renewal of the registration after PoolTTL/3: joins %d", len(fp.joins))
	}
	regAt := joinedAt + PoolTTL/3 + time.Millisecond // poolUntil from here on
	fp.set(func(p *fakePool) { p.joinErr = errors.New("connection refused") })
	h.at(regAt + PoolTTL*2/3 - time.Millisecond) // registration expires in PoolTTL/3 + 1ms
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModePooled {
		t.Fatalf("a failed renewal with the registration alive: %s, want pooled (retry)", m)
	}
	h.fb.heard(h.at(regAt+PoolTTL*2/3), false) // licence until +WitnessTTL
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModeLocal {
		t.Fatalf("a failed renewal with the registration expiring: %s, want local", m)
	}
	h.wantLog("postgres pool unavailable: pacing the fallback fraction locally")
	// Local pacing starts only when the pool's grants counting the
	// fraction are over: registration + PoolTTL + PoolMaxWait + UseGrace.
	localFrom := regAt + PoolTTL + PoolMaxWait + useGrace
	wait := localFrom - (regAt + PoolTTL*2/3)
	_, err := h.fb.ReserveAll(one("k", 1), wait-1)
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || le.Wait != wait {
		t.Fatalf("local reservation right after losing the pool: %v, want a wait of %v", err, wait)
	}
	r, err := h.fb.ReserveAll(one("k", 1), wait)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(t0)+localFrom)) {
		t.Fatalf("first local reservation after the pool: %v %v, want at the pool's end", r, err)
	}
}

// With the witness, pool lost and licence run out: pooled -> stopped;
// stopped -> local when a heartbeat renews the licence; local -> stopped
// when it runs out again.
func TestWitnessLicence(t *testing.T) {
	h, fp := pooledAt(t, witnessed()) // licence: t0 + 1s + 3s
	fp.set(func(p *fakePool) { p.joinErr = errors.New("connection refused") })
	h.at(shareTTL + witTTL) // licence over, registration expiring
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModeStopped {
		t.Fatalf("pool lost with no licence: %s, want stopped", m)
	}
	h.wantLog("cut off from the leader and from postgres (the witness)")
	if h.countLog("postgres pool unavailable") != 0 {
		t.Fatal("announced local pacing while stopping")
	}
	// A heartbeat answered: local within its licence.
	sent := h.at(shareTTL + witTTL + time.Second)
	h.fb.heard(sent, false)
	h.wantMode(shareTTL+witTTL+time.Second, ModeLocal)
	// Reserve stops at the licence's end, and refuses a start past it.
	h.at(shareTTL + 2*witTTL + time.Second - time.Millisecond)
	if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
		t.Fatalf("reserve within the licence: %v", err)
	}
	h.at(shareTTL + 2*witTTL + time.Second)
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("reserve at the licence's end: %v, want ErrStopped", err)
	}
	h.wantMode(shareTTL+2*witTTL+time.Second, ModeStopped)
	// No FallbackFor with the witness: a fresh licence even long after.
	later := shareTTL + fbFor + time.Hour
	h.fb.heard(h.at(later), false)
	h.wantMode(later, ModeLocal)
}

// With the witness, a local reservation whose start lies past the licence
// is refused with ErrStopped, not queued.
func TestWitnessLicenceBoundsStart(t *testing.T) {
	fp := &fakePool{joinErr: errors.New("connection refused")}
	h := newHarness(t, witnessed(), fp.pool())
	h.lapsed()
	h.fb.heard(h.at(shareTTL), false) // licence: +3s
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModeLocal {
		t.Fatalf("pool unreachable at the lapse: %s, want local", m)
	}
	for range 5 {
		if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	h.at(shareTTL + witTTL - 40*time.Millisecond)
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); err != nil {
		t.Fatalf("start just inside the licence: %v", err)
	}
	for range 4 { // the rest of the burst, at once
		if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("start at the licence's end: %v, want ErrStopped", err)
	}
}

// Without the witness, pooled -> stopped after FallbackFor, leaving the pool.
func TestPooledStopsAfterFallbackFor(t *testing.T) {
	h, fp := pooledAt(t, defaultConfig())
	h.wantMode(shareTTL+fbFor-1, ModePooled)
	h.wantMode(shareTTL+fbFor, ModeStopped)
	h.wantLog("fallback budget exhausted")
	h.wg.Wait()
	if fp.leaveCount() != 1 {
		t.Fatalf("leaves %d, want the registration removed", fp.leaveCount())
	}
}

// pooled -> raft on a renewal: the node leaves the pool and reports how far
// its cursors reach; if it cannot, the registration's TTL stands until a
// leave in the background answers, and the next renewal reports the
// pool's reach from that answer.
func TestRenewFromPooled(t *testing.T) {
	h, fp := pooledAt(t, witnessed())
	fp.set(func(p *fakePool) { p.leaveBusy = 200 * time.Millisecond })
	if a := h.renewAt(shareTTL + time.Second); a.Busy != 200*time.Millisecond+useGrace {
		t.Fatalf("back from the pool: busy %v, want the pool's reach + UseGrace", a.Busy)
	}
	if m := h.fb.Current(); m != ModeRaft {
		t.Fatalf("after the renewal: %s", m)
	}
	if a := h.renewAt(shareTTL + time.Second + 100*time.Millisecond); a.Busy != 100*time.Millisecond+useGrace {
		t.Fatalf("the next renewal: busy %v, want the rest of the same reach", a.Busy)
	}
	if a := h.renewAt(shareTTL + 2*time.Second); a.Busy != 0 {
		t.Fatalf("once the pool's grants are over: busy %v, want 0", a.Busy)
	}

	h, fp = pooledAt(t, witnessed())
	fp.set(func(p *fakePool) { p.leaveFail = 1; p.leaveBusy = 200 * time.Millisecond })
	back := shareTTL + time.Second
	if a := h.renewAt(back); a.Busy != poolUntil-back {
		t.Fatalf("back from the pool, leave failed: busy %v, want until the registration's end %v", a.Busy, poolUntil-back)
	}
	h.wg.Wait() // the leave made again in the background answers at back
	if fp.leaveCount() != 2 {
		t.Fatalf("leaves %d, want the failed one and one in the background", fp.leaveCount())
	}
	if a := h.renewAt(back + 100*time.Millisecond); a.Busy != 100*time.Millisecond+useGrace {
		t.Fatalf("the renewal after the background leave: busy %v, want the pool's reach it reported", a.Busy)
	}
}

// A renewal while a join of the pool is in flight cannot leave before the
// join registers: it reports the bound of a registration made by that join
// (joinTimeout + TTL + PoolMaxWait + UseGrace); when the join returns the
// node leaves again, and the next renewal reports the pool's reach.
func TestRenewWhileJoining(t *testing.T) {
	h, fp := pooledAt(t, witnessed())
	gate := make(chan struct{})
	fp.set(func(p *fakePool) { p.joinGate = gate; p.leaveBusy = 300 * time.Millisecond })
	renewDue := poolUntil - PoolMaxWait - useGrace - PoolTTL*2/3 + time.Millisecond
	h.at(renewDue)
	done := make(chan struct{})
	go func() { h.fb.tendPool(context.Background()); close(done) }()
	for {
		h.fb.mu.Lock()
		joining := h.fb.joining
		h.fb.mu.Unlock()
		if joining > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	want := joinTimeout + PoolTTL + PoolMaxWait + useGrace
	if a := h.renewAt(renewDue); a.Busy != want {
		t.Fatalf("renewed while joining: busy %v, want %v", a.Busy, want)
	}
	if fp.leaveCount() != 0 {
		t.Fatalf("left %d times while the join was in flight, want 0 (the join could register after the leave)", fp.leaveCount())
	}
	close(gate)
	<-done
	h.wg.Wait()
	if fp.leaveCount() != 1 {
		t.Fatalf("leaves %d after the join returned, want 1", fp.leaveCount())
	}
	if a := h.renewAt(renewDue + 100*time.Millisecond); a.Busy != 200*time.Millisecond+useGrace {
		t.Fatalf("the renewal after the leave: busy %v, want the pool's reach it reported", a.Busy)
	}
}

// A leave that a join overlapped does not lower the bound: the join may
// have registered after the delete.
func TestLeaveOverlappedByJoinKeepsBound(t *testing.T) {
	h, fp := pooledAt(t, witnessed())
	gate := make(chan struct{})
	fp.set(func(p *fakePool) { p.leaveFail = 1; p.leaveGate = gate })
	back := shareTTL + time.Second
	if a := h.renewAt(back); a.Busy != poolUntil-back {
		t.Fatalf("leave failed: busy %v, want %v", a.Busy, poolUntil-back)
	}
	h.fb.mu.Lock()
	h.fb.joins++ // a join started while the background leave ran
	h.fb.mu.Unlock()
	close(gate)
	h.wg.Wait()
	if a := h.renewAt(back + 100*time.Millisecond); a.Busy != poolUntil-back-100*time.Millisecond {
		t.Fatalf("after a leave a join overlapped: busy %v, want the registration's bound %v", a.Busy, poolUntil-back-100*time.Millisecond)
	}
}

// A fence the pool reports stops a witnessed node (no licence).
func TestJoinFenced(t *testing.T) {
	fp := &fakePool{reachable: true, joinErr: pgstore.ErrFenced}
	h := newHarness(t, witnessed(), fp.pool())
	h.lapsed()
	h.fb.heard(h.at(shareTTL), false)
	h.fb.tendPool(context.Background())
	h.wantLog("the pool refuses it")
	// Current's fast path reports local until FallbackFor past the promise
	// (it does not look at the licence); Reserve does, and stops.
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, raftpace.ErrStopped) {
		t.Fatalf("reserve after the pool refused a fenced member: %v, want ErrStopped", err)
	}
	if m := h.fb.Current(); m != ModeStopped {
		t.Fatalf("pool refused a fenced member: %s, want stopped", m)
	}
	if !h.renewAt(shareTTL + time.Millisecond).Fenced {
		t.Fatal("answer after the pool reported a fence: Fenced false")
	}
}

// local -> pooled again once Postgres is back, at most every 5s, and only
// once the local slots are past their use-by.
func TestRejoinFromLocal(t *testing.T) {
	fp := &fakePool{joinErr: errors.New("down")}
	cfg := defaultConfig()
	h := newHarness(t, cfg, fp.pool())
	h.lapsed()
	h.fb.tendPool(context.Background()) // join fails: local
	if m := h.fb.Current(); m != ModeLocal {
		t.Fatalf("pool down at the lapse: %s, want local", m)
	}
	for range 7 { // the last at +80ms
		if _, err := h.fb.ReserveAll(one("k", 1), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	fp.set(func(p *fakePool) { p.joinErr, p.reachable = nil, true })
	h.at(shareTTL + 10*time.Millisecond)
	h.fb.tendPool(context.Background()) // decides to rejoin: stops granting
	if len(fp.joins) != 1 {
		t.Fatalf("joined with local slots in use: joins %d", len(fp.joins))
	}
	if _, err := h.fb.ReserveAll(one("k", 1), time.Hour); !errors.Is(err, ErrPoolPending) {
		t.Fatalf("reserve while rejoining: %v, want ErrPoolPending", err)
	}
	h.at(shareTTL + 80*time.Millisecond + useGrace - 1)
	h.fb.tendPool(context.Background())
	if len(fp.joins) != 1 {
		t.Fatal("joined before the last local slot's use-by")
	}
	h.at(shareTTL + 80*time.Millisecond + useGrace)
	h.fb.tendPool(context.Background())
	if m := h.fb.Current(); m != ModePooled || len(fp.joins) != 2 {
		t.Fatalf("after the local slots' use-by: %s, joins %d; want pooled", m, len(fp.joins))
	}
}

// A key slower than ShareTTL/3 of this node's fraction may be claimed by
// a leader's last grant up to its overrun past the lapse (wire.ShareOverrun).
// The pool paces every key at once, so the node paces locally until the
// longest overrun is over, then joins; locally, the slow key starts after
// its overrun and the others at once.
func TestSlowKeyDefersThePool(t *testing.T) {
	fp := &fakePool{reachable: true}
	h := newHarness(t, defaultConfig(), fp.pool())
	h.state.mu.Lock()
	h.state.limits["slow"] = fsm.Limit{Rate: 1, Burst: 1} // 4 s at f = 0.25
	h.state.mu.Unlock()
	overrun := 4*time.Second - shareTTL/3
	h.lapsed()
	now := h.at(shareTTL)
	if _, err := h.fb.ReserveAll(one("k", 1), 0); err != nil {
		t.Fatalf("a fast key in local fallback: %v, want at once", err)
	}
	r, err := h.fb.ReserveAll(one("slow", 1), time.Hour)
	if err != nil || !r.At.Equal(epoch.Add(time.Duration(now)+overrun)) {
		t.Fatalf("the slow key: %v %v, want at its overrun %v after the lapse", r, err, overrun)
	}
	h.at(shareTTL + overrun - time.Millisecond)
	h.fb.tendPool(context.Background())
	if len(fp.joins) != 0 || h.fb.Current() != ModeLocal {
		t.Fatalf("joined the pool before the slow key's overrun: joins %v, mode %s", fp.joins, h.fb.Current())
	}
	h.at(shareTTL + overrun + useGrace + time.Millisecond) // past the slow slot's use-by too
	h.fb.tendPool(context.Background())                    // stops local pacing
	h.fb.tendPool(context.Background())                    // joins
	if len(fp.joins) != 1 || h.fb.Current() != ModePooled {
		t.Fatalf("after the overrun: joins %v, mode %s, want pooled", fp.joins, h.fb.Current())
	}
}
