package load

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Report is what a load generator (raftpace agent --load-report, or
// raftpace bench-worker) writes at exit: per key, how its reservation calls
// went.
type Report struct {
	Node string              `json:"node"`
	PID  int                 `json:"pid"`
	Keys map[string]*KeyLoad `json:"keys"`
}

// KeyLoad is one key's load in one process.
//
// Latency is the time of the reservation call alone (ReserveN, from the
// call until it returned: the grant's cost), never the paced sleep that
// follows it. Calls that were refused (the wait would pass the maximum) are
// timed too; calls that failed otherwise (no leader, unknown key) are not.
type KeyLoad struct {
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"` // offered arrivals/s (open loop); 0: closed loop

	Calls     uint64 `json:"count"`      // timed reservation calls
	Admitted  uint64 `json:"admitted"`   // events used (recorded in the timeline)
	Shed      uint64 `json:"shed"`       // arrivals not admitted: ShedQueue + refused by the pacer
	ShedQueue uint64 `json:"shed_queue"` // arrivals that found the queue full (open loop)
	Forfeited uint64 `json:"forfeited"`  // grants woken for after their use-by, dropped
	Errors    uint64 `json:"errors"`     // failed calls (not timed)

	P50  int64   `json:"p50_ns"`
	P90  int64   `json:"p90_ns"`
	P99  int64   `json:"p99_ns"`
	P999 int64   `json:"p999_ns"`
	Mean float64 `json:"mean_ns"`
	Max  int64   `json:"max_ns"`

	// From and To (unix ns) bound the load: from when it started (the key's
	// limit known) to when it stopped.
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// SetLatency fills the latency fields from h.
func (k *KeyLoad) SetLatency(h *Histogram) {
	k.Calls = h.Count()
	k.P50 = int64(h.Quantile(0.50))
	k.P90 = int64(h.Quantile(0.90))
	k.P99 = int64(h.Quantile(0.99))
	k.P999 = int64(h.Quantile(0.999))
	k.Mean = float64(h.Mean())
	k.Max = int64(h.Max())
}

// Seconds is the length of the load in seconds.
func (k *KeyLoad) Seconds() float64 {
	if k.To <= k.From {
		return 0
	}
	return time.Duration(k.To - k.From).Seconds()
}

// ReadReport reads a report written by a load generator.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: load report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: load report %s: %w", path, err)
	}
	return &r, nil
}
