package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// fakeBackend answers reservations from a script.
type fakeBackend struct {
	noGate
	mu        sync.Mutex
	grants    []raftpace.Reservation
	errs      []error
	maxWaits  []time.Duration
	forfeited int
}

func (f *fakeBackend) ReserveAll(_ context.Context, _ []raftpace.Want, maxWait time.Duration) (raftpace.Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxWaits = append(f.maxWaits, maxWait)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return raftpace.Reservation{}, err
		}
	}
	g := f.grants[0]
	f.grants = f.grants[1:]
	return g, nil
}
func (f *fakeBackend) Forfeit(raftpace.Reservation) {
	f.mu.Lock()
	f.forfeited++
	f.mu.Unlock()
}
func (f *fakeBackend) SetLimit(context.Context, string, fsm.Limit) error { return nil }
func (f *fakeBackend) Limit(context.Context, string) (fsm.Limit, error)  { return fsm.Limit{}, nil }
func (f *fakeBackend) Limits(context.Context) (map[string]fsm.Limit, error) {
	return nil, nil
}

// noGate is a Backend's pause and slot half that knows no pauses and no
// caps.
type noGate struct{}

func (noGate) Pause(context.Context, string, time.Duration) (time.Duration, error) {
	return 0, errors.New("no gate")
}
func (noGate) PausedFor(string) time.Duration { return 0 }
func (noGate) AcquireSlots(_ context.Context, keys []string, _, _ time.Duration) (raftpace.Slot, error) {
	return raftpace.Slot{}, raftpace.ErrUnknownKey
}
func (noGate) ReleaseSlot(context.Context, raftpace.Slot) error { return nil }
func (noGate) SetCap(context.Context, string, int) error        { return errors.New("no caps") }
func (noGate) Cap(context.Context, string) (int, error)         { return 0, raftpace.ErrUnknownKey }
func (noGate) Caps(context.Context) (map[string]int, error)     { return nil, nil }
func (noGate) Remaining(_ context.Context, key string) (raftpace.Remaining, error) {
	return raftpace.Remaining{Key: key}, nil
}

// A spent quota whose window resets before the context's deadline makes
// Wait sleep to the reset and ask again; one that resets after it is the
// caller's error at once, naming the reset.
func TestWait_QuotaSleepsToItsReset(t *testing.T) {
	reset := time.Now().Add(150 * time.Millisecond)
	spent := &raftpace.QuotaExhaustedError{Key: "q", Quota: 5, Per: "minute", Reset: reset}
	f := &fakeBackend{errs: []error{spent, nil}, grants: []raftpace.Reservation{{At: reset, UseBy: reset.Add(time.Hour)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := New(f).Wait(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(reset) || len(f.maxWaits) != 2 {
		t.Fatalf("Wait returned before the reset, after %d reservations", len(f.maxWaits))
	}
	f = &fakeBackend{errs: []error{&raftpace.QuotaExhaustedError{Key: "q", Reset: time.Now().Add(time.Hour)}}}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	err := New(f).Wait(short, "q")
	var qe *raftpace.QuotaExhaustedError
	if !errors.As(err, &qe) || !errors.Is(err, raftpace.ErrLimitExceeded) || len(f.maxWaits) != 1 {
		t.Fatalf("a reset past the deadline: %v after %d reservations; want the QuotaExhaustedError at once", err, len(f.maxWaits))
	}
}

// A grant whose UseBy has passed when the waiter wakes is forfeited and a
// new one reserved: a late slot is never used.
func TestWait_ForfeitsSlotWokenTooLate(t *testing.T) {
	now := time.Now()
	f := &fakeBackend{grants: []raftpace.Reservation{
		{At: now, UseBy: now.Add(-time.Millisecond)}, // already too late
		{At: now, UseBy: now.Add(time.Hour)},
	}}
	if err := New(f).Wait(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if f.forfeited != 1 || len(f.maxWaits) != 2 {
		t.Errorf("forfeited %d, reservations %d; want 1 and 2", f.forfeited, len(f.maxWaits))
	}
}

func TestWait_CancelForfeits(t *testing.T) {
	now := time.Now()
	f := &fakeBackend{grants: []raftpace.Reservation{{At: now.Add(time.Hour), UseBy: now.Add(2 * time.Hour)}}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err := New(f).Wait(ctx, "k")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if f.forfeited != 1 {
		t.Errorf("forfeited %d, want 1", f.forfeited)
	}
}

// Wait passes the context's deadline as the maximum wait, so the node can
// shed at once instead of queueing past it.
func TestWait_DeadlineIsMaxWait(t *testing.T) {
	f := &fakeBackend{errs: []error{&raftpace.LimitExceededError{Key: "k", Wait: time.Second}}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := New(f).Wait(ctx, "k")
	if !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("got %v, want ErrLimitExceeded", err)
	}
	if mw := f.maxWaits[0]; mw <= 0 || mw > 200*time.Millisecond {
		t.Errorf("max wait %v, want the time to the deadline", mw)
	}
}

func TestReserve_ReturnsDelay(t *testing.T) {
	now := time.Now()
	f := &fakeBackend{grants: []raftpace.Reservation{{At: now.Add(300 * time.Millisecond), UseBy: now.Add(time.Second)}}}
	d, err := New(f).Reserve(context.Background(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 200*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("delay %v, want about 300ms", d)
	}
}
