package node

import (
	"errors"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/transport"
)

// Counters for monitoring (agent/metrics exports them to Prometheus):
// reservation outcomes per key, the wait of granted reservations, raft
// apply latency and leadership transitions. They cost a few atomic adds per
// reservation; nothing here is package-global.

// Reservation outcomes, as Metrics reports them.
const (
	OutcomeGranted    = "granted"     // a reservation was granted
	OutcomeRefused    = "refused"     // raftpace.ErrLimitExceeded: the wait would pass the caller's maximum
	OutcomePaused     = "paused"      // *raftpace.PausedError: a pause outlasted the caller's maximum wait
	OutcomeUnknownKey = "unknown_key" // raftpace.ErrUnknownKey: no limit (or no cap) for the key
	OutcomeError      = "error"       // anything else: no leader, closed, stopped, cancelled
	// Slot acquisitions (AcquireSlots), counted for each key of the request.
	OutcomeAcquired           = "acquired"
	OutcomeConcurrencyRefused = "concurrency_refused" // *raftpace.ConcurrencyLimitError: no room within the maximum wait
)

// MaxCountedKeys bounds the keys counted one by one; reservations of
// further keys are counted under OtherKeys.
const MaxCountedKeys = 1024

// OtherKeys is the key the outcomes of keys past MaxCountedKeys are counted
// under. It contains a space, so it is never a valid key.
const OtherKeys = "(other keys)"

// WaitBuckets are the upper bounds (seconds) of the granted-wait histogram.
var WaitBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ApplyBuckets are the upper bounds (seconds) of the raft apply histogram.
var ApplyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// KeyCounts are one key's counters since the node started.
type KeyCounts struct {
	Key string `json:"key"`
	// Reservations (Reserve calls with a valid key and count) by outcome:
	// OutcomeGranted, OutcomeRefused, OutcomePaused, OutcomeUnknownKey,
	// OutcomeError.
	Reservations map[string]uint64 `json:"reservations"`
	// GrantedEvents is the events in granted reservations (their counts).
	GrantedEvents uint64 `json:"granted_events"`
	// Slots (AcquireSlots calls naming the key) by outcome:
	// OutcomeAcquired, OutcomeConcurrencyRefused, OutcomeUnknownKey,
	// OutcomeError.
	Slots map[string]uint64 `json:"slots"`
}

// Histogram is a snapshot of a histogram: Counts[i] is the number of
// observations <= Bounds[i] (cumulative); Count and Sum (seconds) cover
// every observation, those above the last bound included.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// Metrics are the node's monitoring counters (Stats and Status hold the
// rest).
type Metrics struct {
	Keys []KeyCounts `json:"keys"` // sorted by key
	// Wait is the delay of each granted reservation: from the Reserve call
	// to the time its events may go (Reservation.At).
	Wait Histogram `json:"wait"`
	// Apply is the time of each raft apply this node made as leader
	// (horizons, limits, pauses, slots, members), until committed and
	// applied here, or failed.
	Apply Histogram `json:"apply"`
	// LeadershipTransitions counts the times this node gained or lost raft
	// leadership.
	LeadershipTransitions uint64 `json:"leadership_transitions"`
	// Transport is the node's RPC and raft transport counters.
	Transport transport.Stats `json:"transport"`
}

// Metrics returns the node's monitoring counters.
func (n *Node) Metrics() Metrics {
	return Metrics{
		Keys:                  n.keyCounts.snapshot(),
		Wait:                  n.waitHist.snapshot(),
		Apply:                 n.applyHist.snapshot(),
		LeadershipTransitions: n.leaderTransitions.Load(),
		Transport:             n.trans.Stats(),
	}
}

// keyOutcomes counts outcomes per key in a bounded map that reservations
// read without a lock.
type keyOutcomes struct {
	m    sync.Map // string -> *keyCounter
	size atomic.Int64
	mu   sync.Mutex // serialises inserts (so size stays exact)
}

type keyCounter struct {
	granted, refused, paused, unknown, failed atomic.Uint64
	events                                    atomic.Uint64
	acquired, concRefused, slotUnknown        atomic.Uint64
	slotFailed                                atomic.Uint64
}

func (k *keyOutcomes) get(key string) *keyCounter {
	if c, ok := k.m.Load(key); ok {
		return c.(*keyCounter)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.m.Load(key); ok {
		return c.(*keyCounter)
	}
	if k.size.Load() >= MaxCountedKeys && key != OtherKeys {
		return k.getLocked(OtherKeys)
	}
	return k.getLocked(key)
}

func (k *keyOutcomes) getLocked(key string) *keyCounter {
	if c, ok := k.m.Load(key); ok {
		return c.(*keyCounter)
	}
	c := &keyCounter{}
	k.m.Store(key, c)
	k.size.Add(1)
	return c
}

func (k *keyOutcomes) snapshot() []KeyCounts {
	var out []KeyCounts
	k.m.Range(func(key, v any) bool {
		c := v.(*keyCounter)
		out = append(out, KeyCounts{
			Key: key.(string),
			Reservations: map[string]uint64{
				OutcomeGranted: c.granted.Load(), OutcomeRefused: c.refused.Load(), OutcomePaused: c.paused.Load(),
				OutcomeUnknownKey: c.unknown.Load(), OutcomeError: c.failed.Load(),
			},
			GrantedEvents: c.events.Load(),
			Slots: map[string]uint64{
				OutcomeAcquired: c.acquired.Load(), OutcomeConcurrencyRefused: c.concRefused.Load(),
				OutcomeUnknownKey: c.slotUnknown.Load(), OutcomeError: c.slotFailed.Load(),
			},
		})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// reserved records the outcome of one Reserve call that began at begin:
// the per-key counters, the node's Stats and the admitted history. It is
// the one place a reservation's outcome is counted.
func (n *Node) reserved(key string, count int, begin time.Time, r raftpace.Reservation, err error) {
	c := n.keyCounts.get(key)
	var pe *raftpace.PausedError
	switch {
	case err == nil:
		c.granted.Add(1)
		c.events.Add(uint64(count))
		n.stats.granted.Add(1)
		n.admittedHist.add(key, count, time.Now())
		n.waitHist.observe(max(0, r.At.Sub(begin)))
	case errors.As(err, &pe): // before raftpace.ErrLimitExceeded, which it also matches
		c.paused.Add(1)
		n.stats.pausedRefusals.Add(1)
	case errors.Is(err, raftpace.ErrLimitExceeded):
		c.refused.Add(1)
		n.stats.refused.Add(1)
	case errors.Is(err, raftpace.ErrUnknownKey):
		c.unknown.Add(1)
		n.stats.unknown.Add(1)
	default:
		c.failed.Add(1)
	}
}

// slotsAcquired counts the outcome of one AcquireSlots call for each key.
func (n *Node) slotsAcquired(keys []string, err error) {
	for _, key := range keys {
		c := n.keyCounts.get(key)
		switch {
		case err == nil:
			c.acquired.Add(1)
		case errors.Is(err, raftpace.ErrConcurrencyLimit):
			c.concRefused.Add(1)
		case errors.Is(err, raftpace.ErrUnknownKey):
			c.slotUnknown.Add(1)
		default:
			c.slotFailed.Add(1)
		}
	}
}

// histogram is a fixed-bucket histogram of durations, lock-free.
type histogram struct {
	bounds []float64       // seconds
	counts []atomic.Uint64 // per bucket (not cumulative); the last is +Inf
	sumNs  atomic.Int64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(h.bounds, s) // first bound >= s
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds))}
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if i < len(h.bounds) {
			out.Counts[i] = cum
		}
	}
	out.Count = cum
	out.Sum = math.Max(0, time.Duration(h.sumNs.Load()).Seconds())
	return out
}
