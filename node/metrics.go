package node

import (
	"errors"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/tally"
	"github.com/raftpace/raftpace/transport"
)

// Counters for monitoring (agent/metrics exports them to Prometheus):
// reservation outcomes per key, the wait of granted reservations, raft
// apply latency and leadership transitions. They cost a few atomic adds per
// reservation; nothing here is package-global. The counting machinery is
// package node/tally; here are what it counts and the results.

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
		Keys:                  n.keyCountsSnapshot(),
		Wait:                  Histogram(n.waitHist.Snapshot()),
		Apply:                 Histogram(n.applyHist.Snapshot()),
		LeadershipTransitions: n.leaderTransitions.Load(),
		Transport:             n.trans.Stats(),
	}
}

// keyCountsSnapshot is every counted key's counters, sorted by key.
func (n *Node) keyCountsSnapshot() []KeyCounts {
	var out []KeyCounts
	n.keyCounts.Each(func(key string, c *tally.Counter) {
		out = append(out, KeyCounts{
			Key: key,
			Reservations: map[string]uint64{
				OutcomeGranted: c.Granted.Load(), OutcomeRefused: c.Refused.Load(), OutcomePaused: c.Paused.Load(),
				OutcomeUnknownKey: c.Unknown.Load(), OutcomeError: c.Failed.Load(),
			},
			GrantedEvents: c.Events.Load(),
			Slots: map[string]uint64{
				OutcomeAcquired: c.Acquired.Load(), OutcomeConcurrencyRefused: c.ConcRefused.Load(),
				OutcomeUnknownKey: c.SlotUnknown.Load(), OutcomeError: c.SlotFailed.Load(),
			},
		})
	})
	return out
}

// reserved records the outcome of one Reserve call that began at begin:
// the per-key counters, the node's Stats and the admitted history. It is
// the one place a reservation's outcome is counted.
func (n *Node) reserved(key string, count int, begin time.Time, r raftpace.Reservation, err error) {
	c := n.keyCounts.Get(key)
	var pe *raftpace.PausedError
	switch {
	case err == nil:
		c.Granted.Add(1)
		c.Events.Add(uint64(count))
		n.stats.granted.Add(1)
		n.admittedHist.Add(key, count, time.Now())
		n.waitHist.Observe(max(0, r.At.Sub(begin)))
	case errors.As(err, &pe): // before raftpace.ErrLimitExceeded, which it also matches
		c.Paused.Add(1)
		n.stats.pausedRefusals.Add(1)
	case errors.Is(err, raftpace.ErrLimitExceeded):
		c.Refused.Add(1)
		n.stats.refused.Add(1)
	case errors.Is(err, raftpace.ErrUnknownKey):
		c.Unknown.Add(1)
		n.stats.unknown.Add(1)
	default:
		c.Failed.Add(1)
	}
}

// slotsAcquired counts the outcome of one AcquireSlots call for each key.
func (n *Node) slotsAcquired(keys []string, err error) {
	for _, key := range keys {
		c := n.keyCounts.Get(key)
		switch {
		case err == nil:
			c.Acquired.Add(1)
		case errors.Is(err, raftpace.ErrConcurrencyLimit):
			c.ConcRefused.Add(1)
		case errors.Is(err, raftpace.ErrUnknownKey):
			c.SlotUnknown.Add(1)
		default:
			c.SlotFailed.Add(1)
		}
	}
}
