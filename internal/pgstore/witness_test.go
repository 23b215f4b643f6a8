package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// fence calls Fence and fails the test on error.
func fence(t *testing.T, s *Store, id string, stale, licence time.Duration) FenceResult {
	t.Helper()
	r, err := s.Fence(ctxT(t), id, stale, licence)
	if err != nil {
		t.Fatalf("fence %q: %v", id, err)
	}
	return r
}

// witness calls Witness and fails the test on error.
func witness(t *testing.T, s *Store, id string) bool {
	t.Helper()
	fenced, err := s.Witness(ctxT(t), id)
	if err != nil {
		t.Fatalf("witness %q: %v", id, err)
	}
	return fenced
}

// TestWitness_FenceUnfence walks one member through heartbeat, a refused
// fence, a fence, its effects on the member, and Unfence; and fences a
// member never seen.
func TestWitness_FenceUnfence(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	const stale, licence = 200 * time.Millisecond, 2 * time.Second

	if witness(t, s, "x") {
		t.Fatal("a new member is fenced")
	}
	r := fence(t, s, "x", stale, licence)
	if r.Fenced || r.Wait != 0 || !strings.HasPrefix(r.Reason, "seen ") || r.LastSeen < 0 || r.LastSeen >= stale {
		t.Fatalf("fence right after a heartbeat: %+v, want refused, seen less than %v ago", r, stale)
	}
	beforeSeen := time.Now()
	if witness(t, s, "x") {
		t.Fatal("a refused fence fenced the member")
	}
	afterSeen := time.Now()

	time.Sleep(stale + 100*time.Millisecond)
	beforeFence := time.Now()
	r = fence(t, s, "x", stale, licence)
	afterFence := time.Now()
	if !r.Fenced || !strings.HasPrefix(r.Reason, "last seen ") {
		t.Fatalf("fence %v after the last heartbeat: %+v, want fenced", time.Since(afterSeen), r)
	}
	// seen_at lies within the last Witness call and Fence's clock readings
	// within the Fence call: LastSeen = now - seen_at, and Wait =
	// seen_at + licence - now', now' a later reading. slack allows for
	// Postgres's clock (CLOCK_REALTIME) drifting from Go's monotonic one.
	const slack = 10 * time.Millisecond
	if lo, hi := beforeFence.Sub(afterSeen), afterFence.Sub(beforeSeen); r.LastSeen < lo-slack || r.LastSeen > hi+slack {
		t.Fatalf("LastSeen %v, want in [%v, %v]", r.LastSeen, lo, hi)
	}
	if lo, hi := licence-afterFence.Sub(beforeSeen), licence-beforeFence.Sub(afterSeen); r.Wait < lo-slack || r.Wait > hi+slack || r.Wait > licence-r.LastSeen {
		t.Fatalf("Wait %v, want in [%v, %v] and at most licence - LastSeen = %v", r.Wait, lo, hi, licence-r.LastSeen)
	}
	t.Logf("fenced: %+v", r)

	// The fence holds: heartbeats report it, JoinPool refuses, ReservePooled
	// refuses x while another member reserves.
	if !witness(t, s, "x") {
		t.Fatal("Witness after the fence: not fenced")
	}
	wantErr(t, s.JoinPool(ctx, "x", 0.5, time.Minute), ErrFenced)
	must(t, s.JoinPool(ctx, "y", 0.5, time.Minute))
	lim := fsm.Limit{Rate: 1, Burst: 1} // F = 0.5: one slot per 2s
	_, err := s.ReservePooled(ctx, "x", "k", lim, 1, time.Hour)
	wantErr(t, err, ErrNotInPool)
	if w, _ := reserve(t, s, "y", "k", lim, 1, 0); w != 0 {
		t.Fatalf("y's first reservation waits %v", w)
	}
	// A fenced member is fenced again whatever its heartbeats.
	r = fence(t, s, "x", stale, licence)
	if !r.Fenced || !strings.HasPrefix(r.Reason, "already fenced") || r.Wait > licence || r.Wait < time.Second {
		t.Fatalf("second fence: %+v, want fenced again, Wait in [1s, licence] (the busy cursor or the fenced heartbeat)", r)
	}

	// Unfence restores the member.
	must(t, s.Unfence(ctx, "x"))
	if witness(t, s, "x") {
		t.Fatal("Witness after Unfence: still fenced")
	}
	must(t, s.JoinPool(ctx, "x", 0.5, time.Minute))
	// F = 1 now: one slot a second. The cursor is ~2s ahead from y's slot.
	w, _ := reserve(t, s, "x", "k2", lim, 1, 0)
	if w != 0 {
		t.Fatalf("x after Unfence: wait %v on a fresh key", w)
	}

	// A member never seen is fenced at once; its Wait is the pool's busy
	// time (the cursor of "k2" lies 1s ahead, "k" up to 2s).
	r = fence(t, s, "ghost", stale, licence)
	if !r.Fenced || r.LastSeen != -1 || r.Reason != "never seen" || r.Wait <= 0 || r.Wait > 2*time.Second {
		t.Fatalf("fence of a member never seen: %+v, want fenced, LastSeen -1, Wait in (0, 2s]", r)
	}
	busy, err := s.LeavePool(ctx, "nobody")
	must(t, err)
	if busy > r.Wait {
		t.Fatalf("busy %v later than the fence's Wait %v", busy, r.Wait)
	}
	if !witness(t, s, "ghost") {
		t.Fatal("the ghost's first heartbeat after its fence: not fenced")
	}
	wantErr(t, s.JoinPool(ctx, "ghost", 0.1, time.Minute), ErrFenced)
	must(t, s.Unfence(ctx, "never-seen-either")) // nothing to lift: no error
}

// TestFence_RefusedWhileRegistered: a member whose heartbeats are stale but
// whose pool registration is live is not fenced; once it leaves, or its
// registration lapses, it is.
func TestFence_RefusedWhileRegistered(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	const stale, licence = 50 * time.Millisecond, time.Second
	must(t, s.JoinPool(ctx, "x", 1, time.Minute))
	time.Sleep(2 * stale)
	r := fence(t, s, "x", stale, licence)
	if r.Fenced || r.Reason != "registered in the pool" || r.Wait != 0 || r.LastSeen < 2*stale {
		t.Fatalf("fence of a registered member: %+v, want refused as registered, LastSeen >= %v", r, 2*stale)
	}
	// Nothing changed: x is not fenced and still reserves.
	if witness(t, s, "x") {
		t.Fatal("a refused fence fenced the member")
	}
	reserve(t, s, "x", "k", fsm.Limit{Rate: 1000, Burst: 1}, 1, time.Second)
	_, err := s.LeavePool(ctx, "x")
	must(t, err)
	time.Sleep(2 * stale)
	if r := fence(t, s, "x", stale, licence); !r.Fenced {
		t.Fatalf("fence after LeavePool: %+v, want fenced", r)
	}

	// A registration that lapsed does not protect its member.
	must(t, s.JoinPool(ctx, "z", 1, stale/2))
	time.Sleep(2 * stale)
	if r := fence(t, s, "z", stale, licence); !r.Fenced {
		t.Fatalf("fence after the registration lapsed: %+v, want fenced", r)
	}
	_, err = s.ReservePooled(ctx, "z", "k", fsm.Limit{Rate: 1000, Burst: 1}, 1, time.Second)
	wantErr(t, err, ErrNotInPool)
}

// TestPool_UnregisteredCallerRefused: a caller without a live registration
// of its own reserves nothing, even while others are registered, and its
// refusal does not move the cursor.
func TestPool_UnregisteredCallerRefused(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "y", 1, time.Minute))
	lim := fsm.Limit{Rate: 1, Burst: 1}
	for range 3 {
		_, err := s.ReservePooled(ctx, "x", "k", lim, 1, time.Hour)
		wantErr(t, err, ErrNotInPool)
		if !strings.Contains(err.Error(), `"x" has no live registration`) {
			t.Fatalf("error %q does not name the caller", err)
		}
	}
	if w, _ := reserve(t, s, "y", "k", lim, 1, 0); w != 0 {
		t.Fatalf("after x's refusals y waits %v: they moved the cursor", w)
	}
}

// TestFence_RacesJoinAndReserve: goroutines on several Stores heartbeat,
// join and reserve for member x (registrations of a few ms, so that they
// keep lapsing) while another Store fences x as soon as Postgres lets it,
// and after a while lifts the fence again, for several rounds. Every x
// call that starts after a Fence returned (and before the Unfence) fails;
// every slot x reserved before a fence starts before that fence's end (the
// Postgres clock after Fence returned, plus Wait); and so does the licence
// of every heartbeat before it, measured from a Postgres clock reading
// before the heartbeat was sent. Member y reserves throughout.
func TestFence_RacesJoinAndReserve(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openStore(t, schema, "c"), openStore(t, schema, "c"), openStore(t, schema, "c")}
	fencer := openStore(t, schema, "c")
	ctx := ctxT(t)
	const (
		rounds    = 6
		maxRounds = 60
		ttl       = 3 * time.Millisecond
		stale     = time.Microsecond // only a live registration refuses the fence
		licence   = 50 * time.Millisecond
	)
	must(t, fencer.JoinPool(ctx, "y", 0.5, time.Minute))
	lim := fsm.Limit{Rate: 400, Burst: 1} // F = 1: 2.5ms apart; F = 0.5: 5ms

	var (
		mu     sync.Mutex
		calls  []raceCall
		fenced atomic.Bool
		ySlots atomic.Int64 // y's admitted reservations while x was fenced
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		s := stores[g%len(stores)]
		rng := rand.New(rand.NewPCG(uint64(g), 1))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				c := raceCall{}
				switch n := rng.IntN(10); {
				case n < 2:
					c.op = "witness"
				case n < 4:
					c.op = "join"
				default:
					c.op = "reserve"
				}
				if c.op != "reserve" {
					if err := s.pool.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::int8`).Scan(&c.sentUS); err != nil {
						t.Error(err)
						return
					}
				}
				c.begin = time.Now()
				switch c.op {
				case "witness":
					c.fencedAnswer, c.err = s.Witness(ctx, "x")
					c.ok = c.err == nil && !c.fencedAnswer
				case "join":
					c.err = s.JoinPool(ctx, "x", 0.5, ttl)
					c.ok = c.err == nil
				case "reserve":
					_, c.startUS, c.err = s.reservePooled(ctx, "x", "k", lim, 1, 100*time.Millisecond)
					c.ok = c.err == nil
				}
				c.end = time.Now()
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { // y, the member that stays
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _, err := stores[0].reservePooled(ctx, "y", "k", lim, 1, 100*time.Millisecond)
			switch {
			case errors.Is(err, ErrLimitExceeded):
				time.Sleep(time.Millisecond)
			case err != nil:
				t.Error(err)
				return
			case fenced.Load():
				ySlots.Add(1)
			}
		}
	})

	var fences []fenceRound
	// exercised: whether the calls so far reach every case the checks
	// below look at. On a loaded machine six rounds have left one of them
	// empty; the test fences on until each is reached, so it asserts the
	// fence, not how a scheduler spread the goroutines.
	exercised := func() bool {
		mu.Lock()
		defer mu.Unlock()
		c := tally(calls, fences, licence)
		return c.xSlots > 0 && c.licences > 0 && c.after > 0 && ySlots.Load() > 0
	}
fencing:
	for round := 0; round < rounds || (round < maxRounds && !exercised()); round++ {
		time.Sleep(30 * time.Millisecond)
		var f fenceRound
		from := time.Now()
		for {
			r, err := fencer.Fence(ctx, "x", stale, licence)
			if err != nil {
				t.Error(err)
				break fencing
			}
			if r.Fenced {
				f.r, f.returned = r, time.Now()
				fenced.Store(true)
				f.endUS = pgNowUS(t, fencer) + r.Wait.Microseconds()
				break
			}
			f.refused++
			if time.Since(from) > 10*time.Second {
				t.Errorf("Fence refused %d times in %v", f.refused, time.Since(from))
				break fencing
			}
		}
		time.Sleep(20 * time.Millisecond)
		f.unfencing = time.Now()
		fenced.Store(false)
		fences = append(fences, f)
		if err := fencer.Unfence(ctx, "x"); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	c := tally(calls, fences, licence)
	for _, p := range c.problems {
		t.Error(p)
	}
	refused := 0
	for _, f := range fences {
		refused += f.refused
	}
	if c.xSlots == 0 || c.licences == 0 || c.after == 0 || ySlots.Load() == 0 {
		t.Fatalf("after %d rounds: %d x slots, %d licences, %d x calls while fenced, %d y slots while x was fenced: the test did not exercise the race",
			len(fences), c.xSlots, c.licences, c.after, ySlots.Load())
	}
	t.Logf("%d fences after %d refusals in all; %d x calls, %d while fenced; %d x slots and %d licences before a fence; %d y slots while x was fenced",
		len(fences), refused, len(calls), c.after, c.xSlots, c.licences, ySlots.Load())
}

// raceCall is one call of member x in TestFence_RacesJoinAndReserve.
type raceCall struct {
	op           string // "witness", "join", "reserve"
	begin, end   time.Time
	sentUS       int64 // Postgres's clock before a heartbeat was sent
	ok           bool  // a heartbeat unfenced, a join or a reservation admitted
	startUS      int64 // slot start of an admitted reservation
	err          error
	fencedAnswer bool
}

// fenceRound is one Fence (retried until it fenced) and its Unfence.
type fenceRound struct {
	r                   FenceResult
	refused             int
	returned, unfencing time.Time // Fence returned; Unfence called
	endUS               int64     // Postgres's clock after Fence returned, plus Wait
}

// raceTally is what tally found: the calls that tested something, and
// each call that broke the fence's promise.
type raceTally struct {
	after    int // x calls that began after a fence returned and ended before its Unfence
	xSlots   int // x slots reserved before a fence, checked against its end
	licences int // x heartbeats before a fence, checked against its end
	problems []string
}

// tally checks calls against fences, where a heartbeat gives a licence
// of licence from when it was sent.
func tally(calls []raceCall, fences []fenceRound, licence time.Duration) raceTally {
	var t raceTally
	// A call that began after fence i returned and ended before its
	// Unfence began must fail (one that overlaps the Unfence may go either
	// way). A call that succeeded is checked against the first fence that
	// returned after it began: it ran after the Unfence before that (or it
	// would have failed) and, if the fence is atomic, before that fence.
	for _, c := range calls {
		i, _ := slices.BinarySearchFunc(fences, c.begin, func(f fenceRound, at time.Time) int { return f.returned.Compare(at) })
		// fences[i] is the first fence that returned at or after c.begin.
		if i > 0 && c.end.Before(fences[i-1].unfencing) {
			t.after++
			switch {
			case c.op == "witness" && (c.err != nil || !c.fencedAnswer):
				t.problems = append(t.problems, fmt.Sprintf("Witness after fence %d: fenced %v, err %v; want fenced", i-1, c.fencedAnswer, c.err))
			case c.op == "join" && !errors.Is(c.err, ErrFenced):
				t.problems = append(t.problems, fmt.Sprintf("JoinPool after fence %d: %v, want ErrFenced", i-1, c.err))
			case c.op == "reserve" && !errors.Is(c.err, ErrNotInPool):
				t.problems = append(t.problems, fmt.Sprintf("ReservePooled after fence %d: %v, want ErrNotInPool", i-1, c.err))
			}
			continue
		}
		if c.err != nil && !errors.Is(c.err, ErrNotInPool) && !errors.Is(c.err, ErrLimitExceeded) && !errors.Is(c.err, ErrFenced) {
			t.problems = append(t.problems, fmt.Sprintf("%s: %v", c.op, c.err))
		}
		if !c.ok || i == len(fences) {
			continue // failed, or after the last Unfence
		}
		if c.end.After(fences[i].unfencing) {
			// It may have committed after fence i's Unfence, once another
			// goroutine had joined x again: a slot past fence i's end is
			// then allowed, so this call shows nothing either way (a
			// plain CI run, k6: a reservation begun before fence 0
			// returned got a slot 64ms past its end).
			continue
		}
		end := fences[i].endUS
		switch c.op {
		case "reserve":
			t.xSlots++
			if c.startUS >= end {
				t.problems = append(t.problems, fmt.Sprintf("an x slot at %dµs starts %dµs after fence %d's end (%+v)", c.startUS, c.startUS-end, i, fences[i].r))
			}
		default:
			t.licences++
			if l := c.sentUS + licence.Microseconds(); l > end {
				t.problems = append(t.problems, fmt.Sprintf("a %s sent at %dµs gave a licence until %dµs, %dµs after fence %d's end (%+v)", c.op, c.sentUS, l, l-end, i, fences[i].r))
			}
		}
	}
	return t
}

func TestWitness_Invalid(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	for name, err := range map[string]error{
		"witness: bad id": func() error { _, err := s.Witness(ctx, "a b"); return err }(),
		"fence: bad id":   func() error { _, err := s.Fence(ctx, "", time.Second, time.Second); return err }(),
		"fence: stale 0":  func() error { _, err := s.Fence(ctx, "a", 0, time.Second); return err }(),
		"fence: licence<0": func() error {
			_, err := s.Fence(ctx, "a", time.Second, -time.Second)
			return err
		}(),
		"unfence: bad id": s.Unfence(ctx, ""),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Every problem at once.
	_, err := s.Fence(ctx, "a b", 0, 0)
	if msg := err.Error(); !strings.Contains(msg, "stale 0s") || !strings.Contains(msg, "licence 0s") || !strings.Contains(msg, "whitespace") {
		t.Fatalf("Fence with three bad arguments: %q, want all three named", msg)
	}
	// Nothing was written: "a" was never seen.
	if r := fence(t, s, "a", time.Second, time.Second); r.LastSeen != -1 {
		t.Fatalf("after invalid calls: %+v, want a member never seen", r)
	}
	if _, err := s.Witness(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
}

// TestFence_WaitsForJoinInFlight: a JoinPool whose heartbeat has run but
// whose registration is not yet committed holds the member's witness row;
// a Fence meanwhile waits for it, then sees the registration and refuses.
// (Reading the member's state before taking the lock, or in the locking
// statement, would miss the registration and leave it live after a fence.)
func TestFence_WaitsForJoinInFlight(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	witness(t, s, "x") // the row exists: a Fence must lock it, not wait to insert it
	tx, err := s.pool.Begin(ctx)
	must(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var fenced bool
	must(t, tx.QueryRow(ctx, s.q.witness, s.Cluster(), "x").Scan(&fenced)) // JoinPool's first statement
	done := make(chan FenceResult, 1)
	go func() {
		r, err := s.Fence(ctx, "x", time.Microsecond, time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("Fence returned %+v while a JoinPool held the witness row", r)
	case <-time.After(100 * time.Millisecond):
	}
	_, err = tx.Exec(ctx, s.q.joinPool, s.Cluster(), "x", 1.0, ceilMicros(time.Minute)) // its second
	must(t, err)
	must(t, tx.Commit(ctx))
	if r := <-done; r.Fenced || r.Reason != "registered in the pool" {
		t.Fatalf("Fence after the JoinPool committed: %+v, want refused as registered", r)
	}
	reserve(t, s, "x", "k", fsm.Limit{Rate: 1000, Burst: 1}, 1, time.Second)
}

// TestFence_WaitsForReservationInFlight: a reservation that counted the
// member's registration (and moved a cursor 1s ahead) is still open when
// the registration lapses and a Fence runs; the Fence's DELETE waits for
// it, and the Wait, read after, covers its slot.
func TestFence_WaitsForReservationInFlight(t *testing.T) {
	s := newStore(t, "c")
	ctx := ctxT(t)
	must(t, s.JoinPool(ctx, "x", 1, 150*time.Millisecond))
	tx, err := s.pool.Begin(ctx)
	must(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var (
		own, rateOK, valid, admitted bool
		f                            float64
		k, waitUS, startUS, estUS    int64
	)
	// Rate 1, F = 1: the cursor moves 1s ahead (uncommitted).
	must(t, tx.QueryRow(ctx, s.q.reservePooled, s.Cluster(), "k", 1.0, int64(1), int64(1), int64(0), "x").
		Scan(&own, &f, &k, &rateOK, &valid, &admitted, &waitUS, &startUS, &estUS))
	if !own || !admitted {
		t.Fatalf("reservation in the transaction: own %v, admitted %v", own, admitted)
	}
	time.Sleep(250 * time.Millisecond) // the registration lapses, the heartbeat goes stale
	done := make(chan FenceResult, 1)
	go func() {
		r, err := s.Fence(ctx, "x", 100*time.Millisecond, time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("Fence returned %+v while a reservation that counted the registration was open", r)
	case <-time.After(100 * time.Millisecond):
	}
	must(t, tx.Commit(ctx))
	r := <-done
	after := pgNowUS(t, s) // after Fence returned, like the leader's count
	if !r.Fenced || r.Wait <= 0 || after+r.Wait.Microseconds() < startUS+1000000 {
		t.Fatalf("Fence after the reservation committed: %+v; its cursor lies at %dµs, past the fence's end", r, startUS+1000000)
	}
	t.Logf("fenced: %+v", r)
}
