package node

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/report"
	"github.com/raftpace/raftpace/node/tally"
)

// Counters for monitoring (agent/metrics exports them to Prometheus):
// reservation outcomes per key, the wait of granted reservations, raft
// apply latency and leadership transitions. They cost a few atomic adds per
// reservation; nothing here is package-global. The counting machinery is
// package node/tally, the shape of the results (Metrics, KeyCounts, the
// outcomes) package node/report; here is what it counts.

// WaitBuckets are the upper bounds (seconds) of the granted-wait histogram.
var WaitBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ApplyBuckets are the upper bounds (seconds) of the raft apply histogram.
var ApplyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Metrics returns the node's monitoring counters.
func (n *Node) Metrics() report.Metrics {
	return report.Metrics{
		Keys:                  n.keyCountsSnapshot(),
		Wait:                  report.Histogram(n.waitHist.Snapshot()),
		Apply:                 report.Histogram(n.applyHist.Snapshot()),
		LeadershipTransitions: n.leaderTransitions.Load(),
		Transport:             report.TransportStats(n.trans.Stats()),
	}
}

// keyCountsSnapshot is every counted key's counters, sorted by key.
func (n *Node) keyCountsSnapshot() []report.KeyCounts {
	var out []report.KeyCounts
	n.keyCounts.Each(func(key string, c *tally.Counter) {
		out = append(out, report.KeyCounts{
			Key: key,
			Reservations: map[string]uint64{
				report.OutcomeGranted: c.Granted.Load(), report.OutcomeRefused: c.Refused.Load(), report.OutcomePaused: c.Paused.Load(), report.OutcomeQuota: c.Quota.Load(),
				report.OutcomeUnknownKey: c.Unknown.Load(), report.OutcomeError: c.Failed.Load(), report.OutcomeDryRun: c.DryRun.Load(),
			},
			GrantedEvents: c.Events.Load(),
			Slots: map[string]uint64{
				report.OutcomeAcquired: c.Acquired.Load(), report.OutcomeConcurrencyRefused: c.ConcRefused.Load(),
				report.OutcomeUnknownKey: c.SlotUnknown.Load(), report.OutcomeError: c.SlotFailed.Load(),
			},
		})
	})
	return out
}

// reserved records the outcome of one reservation that began at begin (on
// each of its keys, and once in the node-wide counters):
// the per-key counters, the node's Stats and the admitted history. It is
// the one place a reservation's outcome is counted. It reports whether a
// limit in dry run admits the reservation although err says it had no
// slot now (over).
func (n *Node) reserved(wants []raftpace.Want, begin time.Time, r raftpace.Reservation, err error, dryRun bool) (over bool) {
	over = dryRun && wouldWait(err)
	// One outcome: a counter of each key's, and of the node's (which
	// counts reservations, whatever their keys).
	var of func(*tally.Counter) *atomic.Uint64
	var node *atomic.Uint64
	var pe *raftpace.PausedError
	switch {
	case over:
		of = func(c *tally.Counter) *atomic.Uint64 { return &c.DryRun }
	case err == nil:
		of, node = func(c *tally.Counter) *atomic.Uint64 { return &c.Granted }, &n.stats.granted
		n.waitHist.Observe(max(0, r.At.Sub(begin)))
	case errors.As(err, &pe): // before raftpace.ErrLimitExceeded, which it also matches
		of, node = func(c *tally.Counter) *atomic.Uint64 { return &c.Paused }, &n.stats.pausedRefusals
	case errors.Is(err, raftpace.ErrQuotaExhausted): // so too
		of, node = func(c *tally.Counter) *atomic.Uint64 { return &c.Quota }, &n.stats.refused
	case errors.Is(err, raftpace.ErrLimitExceeded):
		of, node = func(c *tally.Counter) *atomic.Uint64 { return &c.Refused }, &n.stats.refused
	case errors.Is(err, raftpace.ErrUnknownKey):
		of, node = func(c *tally.Counter) *atomic.Uint64 { return &c.Unknown }, &n.stats.unknown
	default:
		of = func(c *tally.Counter) *atomic.Uint64 { return &c.Failed }
	}
	now := time.Now()
	for _, w := range wants {
		key := n.state.LimitKey(w.Key) // a template's keys are one row: bounded
		c := n.keyCounts.Get(key)
		of(c).Add(1)
		if over || err == nil {
			c.Events.Add(uint64(w.Count))
			n.admittedHist.Add(key, w.Count, now)
		}
	}
	if node != nil {
		node.Add(1)
	}
	return over
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

// HistorySeconds is how far back a node keeps per-second event counts
// (package node/tally counts them: the node's admitted and granted
// histories, what status, the metrics page and its chart show).
const HistorySeconds = tally.HistorySeconds

// History returns the per-second history of every key this node has seen
// events of, over the last secs seconds (at most HistorySeconds-1).
func (n *Node) History(secs int) []report.KeyHistory {
	now := time.Now()
	end := now.Truncate(time.Second)
	keys := append(n.admittedHist.Keys(), n.grantedHist.Keys()...)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := make([]report.KeyHistory, 0, len(keys))
	for _, k := range keys {
		out = append(out, report.KeyHistory{Key: k, End: end, Admitted: n.admittedHist.Series(k, now, secs), Granted: n.grantedHist.Series(k, now, secs)})
	}
	return out
}
