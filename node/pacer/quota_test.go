package pacer

import (
	"context"
	"errors"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// quotaRig is a leading pacer whose limits and committed quota counts come
// from a real fsm.State, on a fake clock whose wall reading starts at wall0.
type quotaRig struct {
	t     *testing.T
	st    *fsm.State
	p     *Pacer
	clock atomic.Int64 // the pacer's clock; its wall reading is wall0 + (clock - 1e12)
	wall0 time.Time
	// moving: the clock moves on while a grant waits (for a window to
	// begin), as a real one would.
	moving bool
}

func newQuotaRig(t *testing.T, lim fsm.Limit, wall0 time.Time) *quotaRig {
	t.Helper()
	st := fsm.New()
	apply(t, st, fsm.SetLimit{Key: "k", Limit: lim})
	r := &quotaRig{t: t, st: st, wall0: wall0}
	r.clock.Store(1e12)
	r.lead(true)
	return r
}

// lead makes a new leader on the same state (the old one steps down), as
// a leader change does; trusting false is the twin that ignores the
// committed counts.
func (r *quotaRig) lead(trusting bool) {
	if r.p != nil {
		r.p.StepDown()
	}
	p := New(r.clock.Load, time.Second, 20*time.Millisecond,
		func(string) (int64, bool) { return 0, false }, r.st.Limit)
	p.Wall = func() time.Time { return r.wall0.Add(time.Duration(r.clock.Load() - 1e12)) }
	if trusting {
		p.Quotas = r.st.QuotaCount
	}
	p.StoredQuotas = r.st.QuotaCounts
	if !p.Lead(p.StepDown()) {
		r.t.Fatal("pacer did not lead")
	}
	r.p = p
}

// commit commits every pending extension through the state, as raft would.
func (r *quotaRig) commit() {
	for {
		ext, ok := r.p.Collect()
		if !ok {
			return
		}
		if len(ext.Quotas.Entries) > 0 {
			apply(r.t, r.st, ext.Quotas)
		}
		r.p.Committed(ext)
	}
}

// run runs f (a grant), committing what it waits on.
func (r *quotaRig) run(f func() error) error {
	r.t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-r.p.Kicks():
			r.commit()
		case <-tick.C:
			if r.moving {
				r.clock.Add(int64(5 * time.Millisecond)) // time passes while f waits
			}
		case <-timeout:
			r.t.Fatal("no answer in 5 s")
		}
	}
}

func (r *quotaRig) wallOf(t int64) time.Time { return r.wall0.Add(time.Duration(t - 1e12)) }

var noon = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// quotaRun grants reservations, multi-key reservations and leases of one
// key (rate 50/s, quota 300 a minute) for about 150 s of a fake clock, with
// a leader change every few seconds, and returns the events of each
// minute. A new leader that trusts the committed counts never lets a minute
// pass its quota.
func quotaRun(t *testing.T, seed int64, trusting bool) map[time.Time]int {
	lim := fsm.Limit{Rate: 50, Burst: 3, Quota: 300, Per: fsm.PerMinute}
	r := newQuotaRig(t, lim, noon.Add(-20*time.Second))
	r.moving = true
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	perMinute := map[time.Time]int{}
	count := func(at int64, n int) {
		start, _ := fsm.PerMinute.Window(r.wallOf(at))
		perMinute[start] += n
	}
	for step := 0; step < 10000; step++ {
		r.clock.Add(rng.Int63n(int64(30 * time.Millisecond)))
		if rng.Intn(300) == 0 {
			r.lead(trusting)
		}
		maxWait := time.Duration(rng.Int63n(int64(300 * time.Millisecond)))
		entry := r.clock.Load() // a grant's times count from its entry plus its hold
		switch rng.Intn(2) {
		case 0:
			n := 1 + rng.Intn(3)
			var wait, held time.Duration
			if r.run(func() (err error) { wait, held, err = r.p.Reserve(ctx, nil, "k", n, maxWait); return }) == nil {
				count(entry+int64(held+wait), n)
			}
		case 1:
			var l wire.Lease
			if r.run(func() (err error) { l, err = r.p.Lease(ctx, nil, "k", "n1", 1+rng.Intn(8), maxWait); return }) == nil {
				for i := 0; i < l.Count; i++ {
					count(entry+l.Held+l.Slot(i), 1)
				}
			}
		}
	}
	return perMinute
}

func TestQuota_NeverPassedAcrossLeaders(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		full := 0
		for w, n := range quotaRun(t, seed, true) {
			t.Logf("seed %d: the minute from %s: %d events", seed, w.Format(time.TimeOnly), n)
			if n > 300 {
				t.Fatalf("seed %d: the minute from %s held %d events, quota 300", seed, w.Format(time.TimeOnly), n)
			}
			if n >= 250 {
				full++
			}
		}
		if full < 1 {
			t.Fatalf("seed %d: no minute came near its quota: the run proves nothing", seed)
		}
	}
}

// The twin: leaders that start each window's count at 0 instead of the
// committed count pass the quota.
func TestQuota_NeverPassedCanFail(t *testing.T) {
	for w, n := range quotaRun(t, 1, false) {
		if n > 300 {
			t.Logf("the minute from %s: %d events, quota 300", w.Format(time.TimeOnly), n)
			return
		}
	}
	t.Fatal("leaders ignoring the committed counts kept every minute within its quota: the check cannot fail")
}

// A spent quota refuses at once, names its reset, consumes nothing on any
// key of the request; Remaining reads what is left.
func TestQuota_ExhaustedRefusesAndNamesTheReset(t *testing.T) {
	st := fsm.New()
	apply(t, st, fsm.SetLimit{Key: "q", Limit: fsm.Limit{Rate: 1000, Burst: 5, Quota: 7, Per: fsm.PerHour}})
	apply(t, st, fsm.SetLimit{Key: "g", Limit: fsm.Limit{Rate: 1000, Burst: 5}})
	r := &quotaRig{t: t, st: st, wall0: noon.Add(20 * time.Minute)}
	r.clock.Store(1e12)
	r.lead(true)
	ctx := context.Background()
	for i := 0; i < 7; i++ {
		if err := r.run(func() error { _, _, err := r.p.ReserveAll(ctx, nil, wants("q", 1, "g", 1), time.Second); return err }); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	rem, err := r.p.Remaining("q")
	if err != nil || rem.Used != 7 || rem.Left != 0 || rem.Quota != 7 || rem.Per != "hour" || !rem.Reset.Equal(noon.Add(time.Hour)) {
		t.Fatalf("Remaining = %+v, %v", rem, err)
	}
	gTAT := r.p.keys["g"].tat
	err = r.run(func() error { _, _, err := r.p.ReserveAll(ctx, nil, wants("g", 1, "q", 1), time.Hour); return err })
	var qe *raftpace.QuotaExhaustedError
	if !errors.As(err, &qe) || qe.Key != "q" || !qe.Reset.Equal(noon.Add(time.Hour)) || !errors.Is(err, raftpace.ErrLimitExceeded) {
		t.Fatalf("8th event = %v, want a QuotaExhaustedError for q resetting at 13:00", err)
	}
	if r.p.keys["g"].tat != gTAT {
		t.Fatal("a refused reservation moved g's TAT")
	}
	// The next hour has its own count.
	r.clock.Add(int64(40 * time.Minute))
	if rem, _ := r.p.Remaining("g"); rem.Quota != 0 || rem.Tokens != 5 {
		t.Fatalf("Remaining(g) = %+v: a key without a quota has none, and its whole burst back", rem)
	}
	if err := r.run(func() error { _, _, err := r.p.Reserve(ctx, nil, "q", 5, 0); return err }); err != nil {
		t.Fatalf("the next hour: %v", err)
	}
	if c, _ := st.QuotaCount("q"); c.Window != noon.Add(time.Hour).Unix() || c.Count < 5 {
		t.Fatalf("committed %+v, want the 13:00 window with at least 5", c)
	}
}

// A slot past its window's end is not granted in it: a lease stops at the
// end, and a reservation whose slot lies beyond waits for the next window
// to begin and is counted there.
func TestQuota_SlotsStayInTheirWindow(t *testing.T) {
	r := newQuotaRig(t, fsm.Limit{Rate: 10, Burst: 1, Quota: 1000, Per: fsm.PerMinute}, noon.Add(-250*time.Millisecond))
	ctx := context.Background()
	var l wire.Lease
	if err := r.run(func() (err error) { l, err = r.p.Lease(ctx, nil, "k", "n1", 50, time.Second); return }); err != nil {
		t.Fatal(err)
	}
	now := r.clock.Load()
	if last := r.wallOf(now + l.Slot(l.Count-1)); l.Count < 1 || !last.Before(noon) {
		t.Fatalf("lease of %d slots, last at %s: past the window's end", l.Count, last.Format(time.StampMilli))
	}
	r.p.mu.Lock()
	r.p.keys["k"].tat = now + int64(260*time.Millisecond) // the next slot: 12:00:00.010
	r.p.mu.Unlock()
	go func() {
		time.Sleep(20 * time.Millisecond)
		r.clock.Store(now + int64(270*time.Millisecond)) // 12:00:00.020
	}()
	var wait time.Duration
	if err := r.run(func() (err error) { wait, _, err = r.p.Reserve(ctx, nil, "k", 1, time.Second); return }); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.st.QuotaCount("k"); c.Window != noon.Unix() || c.Count < 1 {
		t.Fatalf("committed %+v, want the 12:00 window", c)
	}
	if used := r.p.keys["k"].q.used; used != 1 {
		t.Fatalf("the 12:00 window counts %d events, want the one granted in it", used)
	}
	_ = wait
}

// A leader whose clock is behind the last one's, just past a window's
// end by that clock, finds the state counting the next window: it grants
// nothing more in the window it still sees (its count is gone), instead of
// starting it again at 0.
func TestQuota_ALaggingClockDoesNotReopenAWindow(t *testing.T) {
	lim := fsm.Limit{Rate: 100, Burst: 5, Quota: 10, Per: fsm.PerMinute}
	r := newQuotaRig(t, lim, noon.Add(-2*time.Second)) // 11:59:58 by this leader's clock
	apply(t, r.st, fsm.CommitQuotas{Entries: []fsm.QuotaEntry{{Key: "k", QuotaCount: fsm.QuotaCount{Per: fsm.PerMinute, Window: noon.Unix(), Count: 4}}}})
	r.lead(true)
	_, _, err := r.p.Reserve(context.Background(), nil, "k", 1, time.Second)
	var qe *raftpace.QuotaExhaustedError
	if !errors.As(err, &qe) || !qe.Reset.Equal(noon) {
		t.Fatalf("a reservation in 11:59 after the state moved to 12:00: %v; want the quota spent until 12:00", err)
	}
	r.clock.Add(int64(3 * time.Second)) // 12:00:01 here too: the 12:00 count goes on from 4
	if err := r.run(func() error { _, _, err := r.p.Reserve(context.Background(), nil, "k", 5, time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	if rem, _ := r.p.Remaining("k"); rem.Used != 9 || rem.Left != 1 {
		t.Fatalf("Remaining = %+v; want 9 used (4 committed before, 5 now), 1 left", rem)
	}
}
