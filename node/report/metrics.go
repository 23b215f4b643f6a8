package report

import "time"

// Reservation outcomes, as Metrics reports them (the keys of
// KeyCounts.Reservations and KeyCounts.Slots).
const (
	OutcomeGranted    = "granted"         // a reservation was granted
	OutcomeRefused    = "refused"         // raftpace.ErrLimitExceeded: the wait would pass the caller's maximum
	OutcomePaused     = "paused"          // *raftpace.PausedError: a pause outlasted the caller's maximum wait
	OutcomeQuota      = "quota_exhausted" // *raftpace.QuotaExhaustedError: the key's quota is spent for its window
	OutcomeUnknownKey = "unknown_key"     // raftpace.ErrUnknownKey: no limit (or no cap) for the key
	OutcomeError      = "error"           // anything else: no leader, closed, stopped, cancelled
	// OutcomeDryRun: admitted at once by a limit in dry run (fsm.Limit.DryRun)
	// that had no slot for it now: enforced, it would have waited or been
	// refused (or waited for a leader). What a dry run is watched for.
	OutcomeDryRun = "dry_run_over"
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

// KeyCounts are one key's counters since the node started.
type KeyCounts struct {
	Key string `json:"key"`
	// Reservations (Reserve calls with a valid key and count) by outcome:
	// OutcomeGranted, OutcomeRefused, OutcomePaused, OutcomeQuota,
	// OutcomeUnknownKey, OutcomeError, OutcomeDryRun.
	Reservations map[string]uint64 `json:"reservations"`
	// GrantedEvents is the events in granted reservations (their counts),
	// those a dry run admitted included.
	GrantedEvents uint64 `json:"granted_events"`
	// Slots (AcquireSlots calls naming the key) by outcome:
	// OutcomeAcquired, OutcomeConcurrencyRefused, OutcomeUnknownKey,
	// OutcomeError.
	Slots map[string]uint64 `json:"slots"`
}

// Histogram is a snapshot of a histogram: Counts[i] is the number of
// observations <= Bounds[i] (cumulative); Count and Sum (seconds) cover
// every observation, those above the last bound included. (node/tally's
// Snapshot has the same fields; node converts from it.)
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
	Transport TransportStats `json:"transport"`
}

// TransportStats is a snapshot of a node's transport counters: package
// transport's Stats, field for field (node converts it, so the two cannot
// drift apart), without its tags, so its JSON names are its field names.
// Counts are since the transport started; Conns* are current values.
type TransportStats struct {
	// Accepted counts inbound connections admitted under MaxConns.
	Accepted uint64
	// Rejected is the sum of the Rejected* counts: inbound connections the
	// transport closed because they broke a rule.
	Rejected uint64
	// RejectedStream: bad first byte, or a raft stream nobody Accepted
	// within HandshakeTimeout.
	RejectedStream uint64
	// RejectedConns: accepted while MaxConns connections were open.
	RejectedConns uint64
	// RejectedFrame: an inbound RPC frame with an oversize or undersize
	// length, or cut short by the end of the stream.
	RejectedFrame uint64
	// RejectedHandshake: no stream byte within HandshakeTimeout.
	RejectedHandshake uint64
	// RejectedPeer: accepted while MaxConnsPerPeer connections from the
	// same IP were open.
	RejectedPeer uint64
	// RejectedTLS: a plaintext dialer on a TLS transport, a TLS dialer on a
	// transport without TLS, or a TLS handshake that failed (a certificate
	// not signed by the cluster CA, none at all, an old TLS version).
	// Handshakes that time out count in RejectedHandshake.
	RejectedTLS uint64

	// ConnsIn and ConnsOut are the connections open now, raft and RPC.
	ConnsIn, ConnsOut int64
	// Dials and DialErrors count outbound connection attempts (raft and RPC).
	Dials, DialErrors uint64

	// CallsIn counts requests received; HandlerErrors those whose handler
	// returned an error (or panicked).
	CallsIn, HandlerErrors uint64
	// CallsOut counts Calls made; CallErrors those that returned an error
	// of any kind (remote, context, connection).
	CallsOut, CallErrors uint64
}

// KeyHistory is a key's per-second counts for the last Seconds whole
// seconds before End (oldest first). Admitted: events this node granted to
// its own callers. Granted: slots this node granted as leader to the whole
// fleet (leased slots included, whether used or dropped), zero while it
// follows.
type KeyHistory struct {
	Key      string    `json:"key"`
	End      time.Time `json:"end"`
	Admitted []uint64  `json:"admitted"`
	Granted  []uint64  `json:"granted"`
}
