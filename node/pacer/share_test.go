package pacer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/shares"
	"github.com/raftpace/raftpace/node/wire"
)

// sharedPacer is a leading pacer for one slow key ("k", 2/s, burst 1)
// whose F comes from shares held by three members, all on one fake clock.
func sharedPacer(t *testing.T) (*Pacer, *shares.Shares, *testClock) {
	t.Helper()
	lim := fsm.Limit{Rate: 2, Burst: 1}
	clock := &testClock{}
	clock.Store(1e12)
	p := leadingPacer(t, clock.Load, lim, 20*time.Millisecond)
	s := shares.New(clock.Load, 2*time.Second)
	s.Lead([]fsm.Member{{ID: "a", Fraction: 1.0 / 3}, {ID: "b", Fraction: 1.0 / 3}, {ID: "c", Fraction: 1.0 / 3}})
	p.Shares = s
	follow(t, p)
	return p, s, clock
}

// follow runs p.FollowShares until the test ends, as a node does.
func follow(t *testing.T, p *Pacer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.FollowShares(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// testClock is a fake clock read by the pacer's waiters while the test
// moves it.
type testClock struct{ atomic.Int64 }

func renewAll(s *shares.Shares, now int64) {
	for _, id := range []string{"a", "b", "c"} {
		s.Renewed(id, now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	}
}

// A slow key's slot past the shares' reach (its queue runs further ahead
// than the last renewal's promise) is neither refused nor paced at a
// smaller F: the request waits on the leader for the next round of
// renewals, and the lease reports how long it was held, so the member
// counts use-by from then and does not drop it as late.
func TestPacer_SlotPastTheShareWaitsForTheRound(t *testing.T) {
	p, s, clock := sharedPacer(t)
	renewAll(s, clock.Load())
	// Queue the key 1.5 s deep: slots at +0, +0.5, +1.0; TAT at +1.5 s.
	for i := range 3 {
		l, err := p.Lease(context.Background(), nil, "k", "m", 1, time.Minute)
		if err != nil || l.Count != 1 || l.Held != 0 {
			t.Fatalf("lease %d = %+v, %v", i, l, err)
		}
	}
	// The next slot (+1.5 s, paced until +2.0 s) is past the reach
	// (renewed at +0 for 2 s): the request waits.
	type result struct {
		l   wire.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := p.Lease(context.Background(), nil, "k", "m", 1, time.Minute)
		got <- result{l, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("a lease past the shares' reach was answered at once: %+v, %v", r.l, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	// 300 ms later one member renews; the round is not over, and F past
	// the reach of the other two would be 1/3: still waiting.
	clock.Add(int64(300 * time.Millisecond))
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1.0 / 3})
	select {
	case r := <-got:
		t.Fatalf("a lease was granted in the middle of a renewal round: %+v, %v", r.l, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	s.Renewed("b", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1.0 / 3})
	s.Renewed("c", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1.0 / 3})
	s.RoundDone()
	var r result
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the round ended and the lease still waits")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Spacing != int64(500*time.Millisecond) {
		t.Errorf("spacing %v, want the full rate's 500ms", time.Duration(r.l.Spacing))
	}
	if r.l.Held != int64(300*time.Millisecond) {
		t.Errorf("held %v, want the 300ms it waited", time.Duration(r.l.Held))
	}
	if r.l.Base != int64(1200*time.Millisecond) {
		t.Errorf("first slot %v after the grant, want 1.2s (TAT +1.5s, granted at +0.3s)", time.Duration(r.l.Base))
	}
}

// The wait is bounded: by the caller's maximum wait (a slot further away
// than that is refused at once, nothing consumed) and by maxHold; then the
// caller is told to retry.
func TestPacer_ShareWaitIsBounded(t *testing.T) {
	p, s, clock := sharedPacer(t)
	renewAll(s, clock.Load())
	for range 3 {
		if _, err := p.Lease(context.Background(), nil, "k", "m", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	begin := time.Now()
	_, err := p.Lease(context.Background(), nil, "k", "m", 1, time.Second)
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || time.Since(begin) > 100*time.Millisecond {
		t.Fatalf("a slot 1.5 s away with a 1 s maximum wait: %v after %v; want limit exceeded at once", err, time.Since(begin))
	}
	begin = time.Now()
	_, err = p.Lease(context.Background(), nil, "k", "m", 1, time.Minute)
	if !errors.Is(err, ErrNoShare) {
		t.Fatalf("no renewal within the hold: %v, want errNoShare", err)
	}
	if took := time.Since(begin); took < MaxHold/2 {
		t.Fatalf("answered after %v, want a wait of about maxHold (%v)", took, MaxHold)
	}
	// Nothing was consumed by the refusals: after a renewal 100 ms later
	// the slot is the next one, at +1.5 s.
	clock.Add(int64(100 * time.Millisecond))
	renewAll(s, clock.Load())
	l, err := p.Lease(context.Background(), nil, "k", "m", 1, time.Minute)
	if err != nil || l.Base != int64(1400*time.Millisecond) {
		t.Fatalf("after the refusals: %+v, %v; want the slot 1.4s after the grant", l, err)
	}
}

// A zero-wait reservation that waits for its key's horizon to be committed
// is granted the slot free at the grant: the time held counts, like the
// network's delay, in the use-by (Held), not against the maximum wait.
func TestPacer_HorizonWaitDoesNotCountAgainstMaxWait(t *testing.T) {
	clock := &testClock{}
	clock.Store(1e12)
	p := leadingPacer(t, clock.Load, fsm.Limit{Rate: 10, Burst: 1}, 20*time.Millisecond)
	p.mu.Lock()
	p.keys["k"].horizon = clock.Load() // no room: the next grant waits for an extension
	p.mu.Unlock()
	type result struct {
		wait, held time.Duration
		err        error
	}
	got := make(chan result, 1)
	go func() {
		w, h, err := p.Reserve(context.Background(), nil, "k", 1, 0)
		got <- result{w, h, err}
	}()
	time.Sleep(20 * time.Millisecond)
	clock.Add(int64(3 * time.Millisecond)) // the commit took 3 ms
	p.mu.Lock()
	p.keys["k"].horizon = clock.Load() + int64(time.Second)
	p.keys["k"].wake()
	p.mu.Unlock()
	select {
	case r := <-got:
		if r.err != nil || r.wait != 0 || r.held != 3*time.Millisecond {
			t.Fatalf("reserve = wait %v held %v, %v; want the slot at the grant, held 3ms", r.wait, r.held, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reservation still waits after the horizon moved")
	}
}

// slowPacer is a leading pacer for one slow key ("k", 0.1/s, burst 1)
// whose leader holds the only member's share ("a", the whole rate) for
// 2 s from each renewal: a single-node cluster.
func slowPacer(t *testing.T) (*Pacer, *shares.Shares, *testClock) {
	t.Helper()
	clock := &testClock{}
	clock.Store(1e12)
	p := leadingPacer(t, clock.Load, fsm.Limit{Rate: 0.1, Burst: 1}, 20*time.Millisecond)
	s := shares.New(clock.Load, 2*time.Second)
	s.Lead([]fsm.Member{{ID: "a", Fraction: 1}})
	p.Shares = s
	follow(t, p)
	return p, s, clock
}

// A key slower than a share's reach (10 s per event, shares reaching 2 s)
// is granted: the leader needs the shares for its slot and ShareTTL/3 of
// its claim, not for the whole interval (wire.ShareOverrun). It was
// never granted at all, on any cluster: every request waited for a reach
// no renewal gives and ended in ErrNoShare.
func TestPacer_KeySlowerThanTheShareReach(t *testing.T) {
	p, s, clock := slowPacer(t)
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1})
	wait, _, err := p.Reserve(context.Background(), nil, "k", 1, 0)
	if err != nil || wait != 0 {
		t.Fatalf("first event of a 0.1/s key: wait %v, %v; want at once", wait, err)
	}
	// The next slot is 10 s away: far past the reach, and the caller
	// waits for no more than 5 s.
	var le *raftpace.LimitExceededError
	if _, _, err := p.Reserve(context.Background(), nil, "k", 1, 5*time.Second); !errors.As(err, &le) || le.Wait != 10*time.Second {
		t.Fatalf("second event within 5s: %v, want LimitExceededError waiting 10s", err)
	}
	// Ten seconds on, renewed: the second slot, and a lease of the third.
	clock.Add(int64(10 * time.Second))
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1})
	if wait, _, err := p.Reserve(context.Background(), nil, "k", 1, 0); err != nil || wait != 0 {
		t.Fatalf("second event 10s later: wait %v, %v", wait, err)
	}
	clock.Add(int64(10 * time.Second))
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1})
	if l, err := p.Lease(context.Background(), nil, "k", "m", 4, 0); err != nil || l.Count != 1 || l.Base != 0 {
		t.Fatalf("lease of the third: %+v, %v; want one slot at once", l, err)
	}
}

// The overrun is all the leader may claim past the reach: a slot whose
// first ShareTTL/3 the shares do not cover waits for the next renewal.
func TestPacer_SlowKeyNeedsTheShareForItsSlot(t *testing.T) {
	p, s, clock := slowPacer(t)
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1})
	// 1.5 s on the share reaches 0.5 s ahead: less than ShareTTL/3.
	clock.Add(int64(1500 * time.Millisecond))
	if _, _, err := p.Reserve(context.Background(), nil, "k", 1, 0); !errors.Is(err, ErrNoShare) {
		t.Fatalf("a slot with 0.5s of share: %v, want ErrNoShare", err)
	}
	s.Renewed("a", clock.Load(), clock.Load(), wire.ShareAnswer{Fraction: 1})
	s.RoundDone()
	if wait, _, err := p.Reserve(context.Background(), nil, "k", 1, 0); err != nil || wait != 0 {
		t.Fatalf("after the renewal: wait %v, %v", wait, err)
	}
}

// With a member not held now and beyond, F is smaller over the whole
// claim and the claim stretches: a third of the members unheld paces the
// slow key at 2/3 of its rate.
func TestPacer_SlowKeySettlesOnItsF(t *testing.T) {
	p, s, clock := thirdsPacer(t, 0.1)
	now := clock.Load()
	s.Renewed("a", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	s.Renewed("b", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	if wait, _, err := p.Reserve(context.Background(), nil, "k", 1, 0); err != nil || wait != 0 {
		t.Fatalf("first event at F=2/3: wait %v, %v", wait, err)
	}
	var le *raftpace.LimitExceededError
	if _, _, err := p.Reserve(context.Background(), nil, "k", 1, 0); !errors.As(err, &le) || le.Wait != 15*time.Second {
		t.Fatalf("second event: %v, want LimitExceededError waiting 15s (10s / (2/3))", err)
	}
}

// A member that left gives its fraction back for every slot to come, so
// past the other members' reach F is not 0 but that fraction. A slow
// key's next slot there is not paced at it: it waits for the next round
// of renewals. Paced at a third, each of the key's three queued callers
// pushed its TAT three seconds on, and a fleet of 50 keys at 1/s admitted
// 50 events every three seconds for 6-10 s after every replacement of a
// member (measured with real agents, stop 31).
func TestPacer_SlotPastTheReachWaitsDespiteAReleasedFraction(t *testing.T) {
	p, s, clock := thirdsPacer(t, 1)
	now := clock.Load()
	renewAll(s, now)
	s.RoundDone()
	clock.Add(int64(time.Second)) // b's and c's shares reach 1 s ahead
	s.Release("a", clock.Load())
	if l, _, err := p.TryLease("k", "m", 1, 5*time.Second); err != nil || l.Spacing != int64(time.Second) {
		t.Fatalf("first slot, in reach: %+v, %v; want one at the full rate", l, err)
	}
	// The next slot is 1 s ahead and its claim needs the shares to reach
	// 1.67 s: only a's released third does.
	if l, _, err := p.TryLease("k", "m", 1, 5*time.Second); !errors.Is(err, wire.ErrWouldWait) {
		t.Fatalf("second slot past the reach: %+v, %v; want ErrWouldWait", l, err)
	}
	now = clock.Load()
	s.Renewed("b", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	s.Renewed("c", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	s.RoundDone()
	if l, _, err := p.TryLease("k", "m", 1, 5*time.Second); err != nil || l.Spacing != int64(time.Second) || l.Base != int64(time.Second) {
		t.Fatalf("second slot after the round: %+v, %v; want one 1 s ahead at the full rate", l, err)
	}
}

// A slow key is not paced at a small F that the shares know will rise
// before its claim would end: after a leader's death, members whose
// fallback grants still reach ahead are held only from then. Paced at F =
// 1/3, a key at 1/s got one slot per 3 s; waiting for F = 1 at 1.5 s, its
// next claim ends at 2.5 s instead of 3 s. A fast key is granted at once.
func TestPacer_SlowKeyWaitsForAKnownRiseOfF(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		wait bool
	}{{1, true}, {100, false}} {
		p, s, clock := thirdsPacer(t, tc.rate)
		now := clock.Load()
		busy := wire.ShareAnswer{Fraction: 1.0 / 3, Busy: 1500 * time.Millisecond}
		s.Renewed("a", now, now, busy)
		s.Renewed("b", now, now, busy)
		s.Renewed("c", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
		s.RoundDone()
		l, _, err := p.TryLease("k", "m", 1, 5*time.Second)
		if tc.wait {
			if !errors.Is(err, wire.ErrWouldWait) {
				t.Fatalf("%v/s at F = 1/3 rising to 1 in 1.5 s: %+v, %v; want ErrWouldWait", tc.rate, l, err)
			}
		} else if err != nil || l.Spacing != int64(3*time.Second/time.Duration(tc.rate)) {
			t.Fatalf("%v/s at F = 1/3: %+v, %v; want a lease at once at a third of the rate", tc.rate, l, err)
		}
		if !tc.wait {
			continue
		}
		clock.Add(int64(1500 * time.Millisecond))
		now = clock.Load()
		for _, id := range []string{"a", "b", "c"} {
			s.Renewed(id, now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
		}
		s.RoundDone()
		if l, _, err := p.TryLease("k", "m", 1, 5*time.Second); err != nil || l.Spacing != int64(time.Second) {
			t.Fatalf("after the rise: %+v, %v; want a slot at the full rate", l, err)
		}
	}
}

// thirdsPacer is a leading pacer for one key ("k" at rate, burst 1) whose
// cluster has three members at a third each ("a", "b", "c"), none held
// yet, shares reaching 2 s from each renewal.
func thirdsPacer(t *testing.T, rate float64) (*Pacer, *shares.Shares, *testClock) {
	t.Helper()
	clock := &testClock{}
	clock.Store(1e12)
	p := leadingPacer(t, clock.Load, fsm.Limit{Rate: rate, Burst: 1}, 20*time.Millisecond)
	s := shares.New(clock.Load, 2*time.Second)
	s.Lead([]fsm.Member{{ID: "a", Fraction: 1.0 / 3}, {ID: "b", Fraction: 1.0 / 3}, {ID: "c", Fraction: 1.0 / 3}})
	p.Shares = s
	follow(t, p)
	return p, s, clock
}
