package pacer

import (
	"context"
	"errors"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// multiPacer is a leading pacer on a settable clock with the given limits
// and horizons that never bind.
func multiPacer(t testing.TB, limits map[string]fsm.Limit) (*Pacer, *int64) {
	t.Helper()
	var clock int64 = 1e12
	p := New(func() int64 { return clock }, time.Second, 100*time.Millisecond,
		func(string) (int64, bool) { return 0, false },
		func(k string) (fsm.Limit, bool) { l, ok := limits[k]; return l, ok })
	if !p.Lead(p.StepDown()) {
		t.Fatal("pacer did not lead")
	}
	p.mu.Lock()
	for k := range limits {
		p.keyLocked(k).horizon = 1 << 62
	}
	p.mu.Unlock()
	return p, &clock
}

func wants(kv ...any) []raftpace.Want {
	var w []raftpace.Want
	for i := 0; i < len(kv); i += 2 {
		w = append(w, raftpace.Want{Key: kv[i].(string), Count: kv[i+1].(int)})
	}
	return w
}

// Every key is granted at one instant: the latest of their own earliest
// starts, and each key's TAT moves as a request arriving then.
func TestReserveAll_OneInstant(t *testing.T) {
	p, clock := multiPacer(t, map[string]fsm.Limit{"fast": {Rate: 10, Burst: 1}, "slow": {Rate: 2, Burst: 1}})
	ctx := context.Background()
	if _, _, err := p.Reserve(ctx, nil, "slow", 1, 0); err != nil { // slow's next slot is 500 ms away
		t.Fatal(err)
	}
	wait, _, err := p.ReserveAll(ctx, nil, wants("fast", 1, "slow", 1), time.Second)
	if err != nil || wait != 500*time.Millisecond {
		t.Fatalf("ReserveAll = %v, %v; want both at slow's next slot, 500ms", wait, err)
	}
	at := *clock + int64(500*time.Millisecond)
	if got := p.keys["fast"].tat; got != at+int64(100*time.Millisecond) {
		t.Errorf("fast's TAT %v past now, want the instant plus one interval (600ms)", time.Duration(got-*clock))
	}
	if got := p.keys["slow"].tat; got != at+int64(500*time.Millisecond) {
		t.Errorf("slow's TAT %v past now, want the instant plus one interval (1s)", time.Duration(got-*clock))
	}
	// The next single reservation of fast comes after the instant, not
	// before it: the grant held fast's slot there.
	if wait, _, err := p.Reserve(ctx, nil, "fast", 1, time.Second); err != nil || wait != 600*time.Millisecond {
		t.Fatalf("fast after the grant = %v, %v; want 600ms", wait, err)
	}
}

// A refusal, for whatever reason, consumes nothing on any key.
func TestReserveAll_NoneConsumed(t *testing.T) {
	p, _ := multiPacer(t, map[string]fsm.Limit{"a": {Rate: 10, Burst: 2}, "b": {Rate: 1, Burst: 1}})
	ctx := context.Background()
	if _, _, err := p.Reserve(ctx, nil, "b", 1, 0); err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{"a": p.keys["a"].tat, "b": p.keys["b"].tat}
	check := func(what string) {
		t.Helper()
		for k, tat := range before {
			if p.keys[k].tat != tat {
				t.Errorf("%s: key %q's TAT moved by %v", what, k, time.Duration(p.keys[k].tat-tat))
			}
		}
	}
	_, _, err := p.ReserveAll(ctx, nil, wants("a", 1, "b", 1), 100*time.Millisecond)
	var le *raftpace.LimitExceededError
	if !errors.As(err, &le) || le.Key != "b" || le.Wait != time.Second {
		t.Fatalf("wait past maxWait: %v; want a LimitExceededError naming b, wait 1s", err)
	}
	check("limit exceeded")
	if _, _, err := p.ReserveAll(ctx, nil, wants("a", 1, "nope", 1), time.Hour); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	check("unknown key")
	if _, _, err := p.ReserveAll(ctx, nil, wants("a", 1, "b", 2), time.Hour); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Fatalf("count past b's burst: %v", err)
	}
	check("count past a burst")
	if _, ok := p.keys["nope"]; ok {
		t.Error("an unknown key was left in memory")
	}
}

// A request whose keys' horizons fall short waits for each, and is granted
// once all of them are extended; nothing is consumed meanwhile.
func TestReserveAll_WaitsForEveryHorizon(t *testing.T) {
	p, clock := multiPacer(t, map[string]fsm.Limit{"a": {Rate: 10, Burst: 1}, "b": {Rate: 10, Burst: 1}})
	p.mu.Lock()
	p.keys["a"].horizon = *clock
	p.keys["b"].horizon = *clock
	tatA, tatB := p.keys["a"].tat, p.keys["b"].tat
	p.mu.Unlock()
	got := make(chan error, 1)
	go func() {
		_, _, err := p.ReserveAll(context.Background(), nil, wants("a", 1, "b", 1), time.Second)
		got <- err
	}()
	extend := func(key string) {
		time.Sleep(20 * time.Millisecond)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.keys["a"].tat != tatA || p.keys["b"].tat != tatB {
			t.Errorf("a key was consumed while the request waited for %q's horizon", key)
		}
		p.keys[key].horizon = *clock + int64(time.Second)
		p.keys[key].wake()
	}
	extend("a")
	select {
	case err := <-got:
		t.Fatalf("granted (%v) while b's horizon fell short", err)
	default:
	}
	extend("b")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after both horizons moved")
	}
}

func TestReserveAll_NotLeading(t *testing.T) {
	p, _ := multiPacer(t, map[string]fsm.Limit{"a": {Rate: 10, Burst: 1}})
	p.StepDown()
	if _, _, err := p.ReserveAll(context.Background(), nil, wants("a", 1), time.Second); err == nil {
		t.Fatal("a pacer that stepped down granted")
	}
}

// The ceiling, per key, of any mix of ReserveAll, Reserve and Lease on a
// moving clock: every window of W holds at most R*W + B events of each
// key. tamper, when set, undoes some grants' TAT after the fact, as an
// uncoordinated second grantor would: the twin shows the check can fail.
func ceilingRun(t *testing.T, seed int64, tamper bool) (worst float64) {
	limits := map[string]fsm.Limit{
		"a": {Rate: 50, Burst: 3},
		"b": {Rate: 20, Burst: 1},
		"c": {Rate: 7, Burst: 5},
	}
	keys := []string{"a", "b", "c"}
	p, clock := multiPacer(t, limits)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	events := map[string][]int64{}
	for step := 0; step < 20000; step++ {
		*clock += rng.Int63n(int64(15 * time.Millisecond))
		before := map[string]int64{}
		for _, k := range keys {
			if p.keys[k] != nil {
				before[k] = p.keys[k].tat
			}
		}
		switch rng.Intn(3) {
		case 0: // several keys
			var w []raftpace.Want
			for _, k := range keys {
				if rng.Intn(2) == 0 {
					w = append(w, raftpace.Want{Key: k, Count: 1 + rng.Intn(limits[k].Burst)})
				}
			}
			if len(w) == 0 {
				continue
			}
			wait, _, err := p.ReserveAll(ctx, nil, w, time.Duration(rng.Int63n(int64(300*time.Millisecond))))
			if err != nil {
				continue
			}
			for _, x := range w {
				for i := 0; i < x.Count; i++ {
					events[x.Key] = append(events[x.Key], *clock+int64(wait))
				}
			}
		case 1:
			k := keys[rng.Intn(3)]
			n := 1 + rng.Intn(limits[k].Burst)
			wait, _, err := p.Reserve(ctx, nil, k, n, time.Duration(rng.Int63n(int64(300*time.Millisecond))))
			if err != nil {
				continue
			}
			for i := 0; i < n; i++ {
				events[k] = append(events[k], *clock+int64(wait))
			}
		case 2:
			k := keys[rng.Intn(3)]
			l, err := p.Lease(ctx, nil, k, "n"+string(rune('1'+rng.Intn(3))), 1+rng.Intn(8), time.Duration(rng.Int63n(int64(300*time.Millisecond))))
			if err != nil {
				continue
			}
			for i := 0; i < l.Count; i++ {
				events[k] = append(events[k], *clock+l.Slot(i))
			}
		}
		if tamper && rng.Intn(4) == 0 {
			for k, tat := range before {
				p.keys[k].tat = tat
			}
		}
	}
	for _, k := range keys {
		ev := events[k]
		if len(ev) < 100 {
			t.Fatalf("key %q: only %d events: the run proves nothing", k, len(ev))
		}
		sort.Slice(ev, func(i, j int) bool { return ev[i] < ev[j] })
		lim := limits[k]
		for _, w := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
			bound := lim.Rate*w.Seconds() + float64(lim.Burst)
			j := 0
			for i := range ev {
				for ev[i]-ev[j] >= int64(w) {
					j++
				}
				if n := float64(i - j + 1); n/bound > worst {
					worst = n / bound
				}
			}
		}
	}
	return worst
}

func TestReserveAll_Ceiling(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		if worst := ceilingRun(t, seed, false); worst > 1 {
			t.Fatalf("seed %d: a window held %.2f times its bound R*W+B", seed, worst)
		}
	}
}

// The twin: the same run with a quarter of the grants forgotten breaks the
// bound, so the check above can fail.
func TestReserveAll_CeilingCanFail(t *testing.T) {
	if worst := ceilingRun(t, 1, true); worst <= 1 {
		t.Fatalf("tampered run's worst window is %.2f of its bound: the check cannot fail", worst)
	}
}

// A claim that runs past the reach of a member's share is not paced at the
// smaller F held that far ahead: it waits for the round that renews the
// share, then goes at the F held now. (Paced at the smaller F, callers
// queued deeper than the reach each stretched the queue further: a fleet
// fell to its leader's own fraction after a leader's kill.)
func TestReserveAll_PastTheReachWaitsNotSlower(t *testing.T) {
	p, s, clock := sharedPacer(t) // "k" at 2/s: one slot per 0.5 s at F = 1
	now := clock.Load()
	for _, id := range []string{"a", "b"} {
		s.Renewed(id, now, now, wire.ShareAnswer{Fraction: 1.0 / 3}) // held to +2 s
	}
	s.Renewed("c", now-int64(1500*time.Millisecond), now-int64(1500*time.Millisecond), wire.ShareAnswer{Fraction: 1.0 / 3}) // to +0.5 s
	p.mu.Lock()
	p.keys["k"].tat = now + int64(time.Second) // the queue runs 1 s deep, past c's reach
	p.mu.Unlock()
	got := make(chan error, 1)
	go func() {
		_, _, err := p.ReserveAll(context.Background(), nil, wants("k", 1), time.Minute)
		got <- err
	}()
	time.Sleep(30 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("granted (%v) past c's reach: paced at F = 2/3 instead of waiting for c's renewal", err)
	default:
	}
	s.Renewed("c", now, now, wire.ShareAnswer{Fraction: 1.0 / 3})
	s.RoundDone()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after c's share was renewed")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.keys["k"].tat - now; d != int64(1500*time.Millisecond) {
		t.Fatalf("TAT moved to +%v; want +1.5s, one interval at F = 1", time.Duration(d))
	}
}
