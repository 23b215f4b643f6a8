package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestAcquire_ReleaseIdempotent(t *testing.T) {
	m := newMem()
	m.caps["k"] = 1
	c := New(m)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := c.Acquire(ctx, []string{"k"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(h.Deadline()); d < 9*time.Second || d > 10*time.Second {
		t.Errorf("deadline %v away, want the TTL 10s", d)
	}
	wctx, wcancel := h.Context(context.Background())
	defer wcancel()
	if dl, ok := wctx.Deadline(); !ok || !dl.Equal(h.Deadline()) {
		t.Errorf("context deadline %v %v, want %v", dl, ok, h.Deadline())
	}
	cancel() // the caller's context is done: release must not use it
	h.Release()
	h.Release()
	_, _, acquired, released := m.snapshot()
	if released[acquired[0].ID] != 1 {
		t.Errorf("released %v, want exactly once", released)
	}
	rc := m.releaseCtx[0]
	if rc.err != nil || !rc.hasDeadline || rc.left <= 0 || rc.left > releaseTimeout {
		t.Errorf("release context %+v, want a live one bounded by %v", rc, releaseTimeout)
	}

	// AcquireSlot's release func is idempotent too, and the slot is free.
	rel, err := c.AcquireSlot(context.Background(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	rel()
	_, _, acquired, released = m.snapshot()
	if len(acquired) != 2 || released[acquired[1].ID] != 1 {
		t.Errorf("acquired %v released %v", acquired, released)
	}
}

func TestAcquire_MaxWaitIsDeadline(t *testing.T) {
	m := newMem()
	m.caps["a"], m.caps["b"] = 1, 1
	c := New(m)
	rel, err := c.AcquireSlots(context.Background(), []string{"a", "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	if mw := m.acquireWait[0]; mw != noDeadline {
		t.Errorf("max wait %v without a deadline, want %v", mw, noDeadline)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.AcquireSlots(ctx, []string{"b"}, time.Second)
	var cle *ConcurrencyLimitError
	if !errors.Is(err, ErrConcurrencyLimit) || !errors.As(err, &cle) {
		t.Fatalf("got %v, want a *ConcurrencyLimitError", err)
	}
	if cle.MaxWait <= 0 || cle.MaxWait > 100*time.Millisecond {
		t.Errorf("max wait %v, want the time to the deadline", cle.MaxWait)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if _, err := c.Acquire(past, []string{"a"}, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want DeadlineExceeded", err)
	}
}

func TestClient_Pause(t *testing.T) {
	m := newMem()
	c := New(m)
	rem, err := c.Pause(context.Background(), "k", time.Minute)
	if err != nil || rem < 59*time.Second {
		t.Fatalf("Pause = %v, %v", rem, err)
	}
	// A shorter hint does not shorten the pause.
	rem, err = c.Pause(context.Background(), "k", time.Second)
	if err != nil || rem < 59*time.Second {
		t.Errorf("Pause = %v, %v; want the longer pause in force", rem, err)
	}
	if p := c.PausedFor("k"); p < 59*time.Second {
		t.Errorf("PausedFor = %v", p)
	}
	m.pauseErr = errors.New("no leader")
	if _, err := c.Pause(context.Background(), "k", time.Second); err == nil || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("got %v, want the error naming the key", err)
	}
}

func TestRegister(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	c := New(m)
	lim := fsm.Limit{Rate: 10, Burst: 1}
	if err := c.Register(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Limit(ctx, "k"); got != lim || m.setLimits != 1 {
		t.Fatalf("limit %v after %d sets, want %v after 1", got, m.setLimits, lim)
	}
	// Identical values: a no-op.
	if err := c.Register(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if m.setLimits != 1 {
		t.Errorf("%d sets, want no new one", m.setLimits)
	}
	// Other values: a conflict naming both, and nothing changed.
	err := c.Register(ctx, "k", fsm.Limit{Rate: 2.5, Burst: 3})
	var pce *PolicyConflictError
	if !errors.Is(err, ErrPolicyConflict) || !errors.As(err, &pce) {
		t.Fatalf("got %v, want a *PolicyConflictError", err)
	}
	if pce.Key != "k" || pce.Registered != "rate=2.5/s burst=3" || pce.Current != "rate=10/s burst=1" {
		t.Errorf("conflict %+v", pce)
	}
	if msg := err.Error(); !strings.Contains(msg, "rate=2.5/s burst=3") || !strings.Contains(msg, "rate=10/s burst=1") {
		t.Errorf("message %q does not name both", msg)
	}
	if got, _ := c.Limit(ctx, "k"); got != lim || m.setLimits != 1 {
		t.Errorf("limit %v after %d sets; want it unchanged", got, m.setLimits)
	}
	// Invalid values are refused before anything is read or set.
	if err := c.Register(ctx, "x", fsm.Limit{Rate: -1, Burst: 1}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("got %v, want ErrInvalidRequest", err)
	}
}

// A concurrent registration of other values that wins between the set and
// the read-back is reported.
func TestRegister_ConcurrentWinner(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	winner := fsm.Limit{Rate: 5, Burst: 2}
	m.onSetLimit = func(string, fsm.Limit) fsm.Limit { return winner }
	err := New(m).Register(ctx, "k", fsm.Limit{Rate: 10, Burst: 1})
	var pce *PolicyConflictError
	if !errors.As(err, &pce) || pce.Registered != "rate=10/s burst=1" || pce.Current != "rate=5/s burst=2" {
		t.Errorf("got %v, want a conflict with the winner", err)
	}
}

func TestRegisterCap(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	c := New(m)
	if err := c.RegisterCap(ctx, "k", 4); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Cap(ctx, "k"); got != 4 || m.setCaps != 1 {
		t.Fatalf("cap %d after %d sets", got, m.setCaps)
	}
	if err := c.RegisterCap(ctx, "k", 4); err != nil || m.setCaps != 1 {
		t.Errorf("identical: %v after %d sets; want a no-op", err, m.setCaps)
	}
	err := c.RegisterCap(ctx, "k", 8)
	var pce *PolicyConflictError
	if !errors.Is(err, ErrPolicyConflict) || !errors.As(err, &pce) || pce.Registered != "max=8" || pce.Current != "max=4" {
		t.Fatalf("got %v, want a conflict max=8 vs max=4", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "max=8") || !strings.Contains(msg, "max=4") {
		t.Errorf("message %q does not name both", msg)
	}
	if got, _ := c.Cap(ctx, "k"); got != 4 {
		t.Errorf("cap %d, want it unchanged", got)
	}
	m.onSetCap = func(string, int) int { return 3 }
	if err := c.RegisterCap(ctx, "j", 2); !errors.As(err, &pce) || pce.Current != "max=3" {
		t.Errorf("got %v, want a conflict with the concurrent winner", err)
	}
	if err := c.RegisterCap(ctx, "j", 0); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("got %v, want ErrInvalidRequest", err)
	}
}

// RegisterAll registers every key once, sets only the missing ones, and
// reports each conflict and bad limit by key.
func TestRegisterAll(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	c := New(m)
	if err := c.SetLimit(ctx, "taken", fsm.Limit{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLimit(ctx, "same", fsm.Limit{Rate: 3, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	limits := map[string]Limit{"taken": {Rate: 2, Burst: 1}, "same": {Rate: 3, Burst: 1}, "bad": {Rate: -1, Burst: 1}}
	for i := range 100 {
		limits["k"+strconv.Itoa(i)] = Limit{Rate: float64(1 + i), Burst: 1}
	}
	sets := m.setLimits
	failed := c.RegisterAll(ctx, limits)
	if len(failed) != 2 || !errors.Is(failed["taken"], ErrPolicyConflict) || !errors.Is(failed["bad"], ErrInvalidRequest) {
		t.Fatalf("failed = %v; want the conflict on taken and the bad limit", failed)
	}
	if got := m.setLimits - sets; got != 100 {
		t.Errorf("%d limits set, want the 100 missing ones", got)
	}
	for i := range 100 {
		if got, err := c.Limit(ctx, "k"+strconv.Itoa(i)); err != nil || got.Rate != float64(1+i) {
			t.Fatalf("k%d: %v, %v", i, got, err)
		}
	}
}
