package fallback

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/wire"
)

// The tests drive a Fallback on a fake clock: nothing sleeps, nothing
// touches a network; the pool is a set of fake functions.

const (
	t0       = int64(10 * time.Second) // the node's clock when New runs
	shareTTL = time.Second
	fbFor    = 5 * time.Second
	useGrace = 100 * time.Millisecond
	slotTTL  = 2 * time.Second
	witTTL   = 3 * time.Second
)

var epoch = time.Unix(1_000_000, 0)

// fakeState is the applied state: limits, caps, an applied index.
type fakeState struct {
	mu      sync.Mutex
	limits  map[string]fsm.Limit
	caps    map[string]int
	applied uint64
}

func (s *fakeState) Limit(key string) (fsm.Limit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limits[key]
	return l, ok
}

func (s *fakeState) Limits() map[string]fsm.Limit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.limits)
}

func (s *fakeState) Cap(key string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.caps[key]
	return c, ok
}

func (s *fakeState) AppliedIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// logBuf collects the log lines (a goroutine may write: leavePoolAsync).
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type harness struct {
	t     *testing.T
	fb    *Fallback
	clock atomic.Int64
	frac  atomic.Uint64 // float64 bits: the committed fraction
	state *fakeState
	logs  *logBuf
	wg    *sync.WaitGroup
}

func defaultConfig() Config {
	return Config{
		NodeID:      "n1",
		ShareTTL:    shareTTL,
		FallbackFor: fbFor,
		UseGrace:    useGrace,
		MaxSlotTTL:  slotTTL,
		WitnessTTL:  witTTL,
	}
}

// newHarness builds a Fallback at t0 with a committed fraction of 0.25,
// key "k" at 100/s with a burst of 20, and key "c" with a cap of 8.
func newHarness(t *testing.T, cfg Config, pool *Pool) *harness {
	t.Helper()
	h := &harness{
		t: t,
		state: &fakeState{
			limits:  map[string]fsm.Limit{"k": {Rate: 100, Burst: 20}, "c": {Rate: 20, Burst: 1}},
			caps:    map[string]int{"c": 8},
			applied: 42,
		},
		logs: &logBuf{},
		wg:   &sync.WaitGroup{},
	}
	h.clock.Store(t0)
	h.setFraction(0.25)
	h.fb = New(cfg, Deps{
		Now:      h.clock.Load,
		Epoch:    epoch,
		Log:      slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		State:    h.state,
		Fraction: func() float64 { return math.Float64frombits(h.frac.Load()) },
		Pool:     pool,
		Ctx:      context.Background(),
		WG:       h.wg,
	})
	t.Cleanup(h.wg.Wait)
	return h
}

func (h *harness) setFraction(f float64) { h.frac.Store(math.Float64bits(f)) }

// at sets the clock to t0 + d.
func (h *harness) at(d time.Duration) int64 {
	now := t0 + int64(d)
	h.clock.Store(now)
	return now
}

// mode sets the clock to t0 + d and returns Current.
func (h *harness) mode(d time.Duration) Mode {
	h.at(d)
	return h.fb.Current()
}

func (h *harness) wantMode(d time.Duration, want Mode) {
	h.t.Helper()
	if got := h.mode(d); got != want {
		h.t.Fatalf("at t0+%v: mode %s, want %s", d, got, want)
	}
}

// renewAt answers a renewal at t0 + d.
func (h *harness) renewAt(d time.Duration) wire.ShareAnswer {
	h.at(d)
	return h.fb.Renew()
}

// lapsed renews at t0 (so the fraction counts) and moves past the promise
// into local fallback at t0 + ShareTTL.
func (h *harness) lapsed() {
	h.t.Helper()
	h.renewAt(0)
	h.wantMode(shareTTL, ModeLocal)
}

func (h *harness) wantLog(sub string) {
	h.t.Helper()
	if !strings.Contains(h.logs.String(), sub) {
		h.t.Fatalf("no log line with %q in:\n%s", sub, h.logs.String())
	}
}

func (h *harness) countLog(sub string) int { return strings.Count(h.logs.String(), sub) }

// one is the wants of a reservation of count events of key.
func one(key string, count int) []raftpace.Want { return []raftpace.Want{{Key: key, Count: count}} }
