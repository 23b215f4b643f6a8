// Package metrics exports a node's state and counters to Prometheus.
//
// One Collector per node reads the node at scrape time (Status, Metrics):
// nothing is copied between scrapes, so a scrape is exact as of when it
// ran, and nothing is registered globally. NewRegistry builds a private
// registry with the node's collector and the Go runtime and process
// collectors; Handler serves it (the agent mounts it at /metrics).
//
// raftpace's own metrics are named raftpace_*; their only labels are key
// (a limit or cap key), outcome and mode.
//
// It is one of the agent's surfaces (agent/admin, agent/metrics, agent/web):
// it sits on top of node and imports only node/report (the shapes of what
// a node reports), not node itself; node, the worker side and the leaf
// libraries under internal/ never import it.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/raftpace/raftpace/node/report"
)

// Node is what the collector reads. *node.Node implements it.
type Node interface {
	Status(ctx context.Context) (report.Status, error)
	Metrics() report.Metrics
}

// ScrapeTimeout bounds the reading of the node's status in one scrape.
const ScrapeTimeout = 5 * time.Second

// Modes are the values of the mode label of raftpace_mode.
var Modes = []string{report.ModeRaft, report.ModeLocal, report.ModePooled, report.ModeStopped}

// NewRegistry returns a registry holding n's collector and the Go runtime
// and process collectors.
func NewRegistry(n Node) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(n))
	reg.MustRegister(collectors.NewGoCollector())
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves the Prometheus text (or protobuf) exposition of
// NewRegistry(n).
func Handler(n Node) http.Handler {
	reg := NewRegistry(n)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             ScrapeTimeout + time.Second,
	})
}

type metric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func newMetric(name, help string, typ prometheus.ValueType, labels ...string) metric {
	return metric{desc: prometheus.NewDesc("raftpace_"+name, help, labels, nil), typ: typ}
}

var (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// The metrics. Each is documented by its help text.
var (
	mUp    = newMetric("status_up", "1 if the node answered its status at this scrape, else 0 (and only the counters below are exported).", gauge)
	mReady = newMetric("ready", "1 if the node can admit events under the promise now (as /readyz answers 200), else 0.", gauge)

	mReservations = newMetric("reservations_total", "Reserve calls by this node's callers, by key and outcome (granted, refused: limit exceeded within the maximum wait, paused: a pause outlasted it, unknown_key, error: no leader, closed, stopped, cancelled, dry_run_over: admitted by a limit in dry run that had no slot for it now).", counter, "key", "outcome")
	mEvents       = newMetric("granted_events_total", "Events in the reservations granted to this node's callers (a reservation may be for several events), by key.", counter, "key")
	mSlots        = newMetric("slot_acquisitions_total", "AcquireSlots calls by this node's callers, counted for each key named, by outcome (acquired, concurrency_refused, unknown_key, error).", counter, "key", "outcome")
	mWait         = newMetric("reservation_wait_seconds", "Delay of each granted reservation: from the Reserve call to the time its events may go.", counter)
	mAdmitted10   = newMetric("admitted_rate_10s", "Events per second granted to this node's callers over the last 10 whole seconds, by key.", gauge, "key")
	mGranted10    = newMetric("fleet_granted_rate_10s", "On the leader: slots per second it granted to the whole fleet (leased slots included, used or not) over the last 10 whole seconds, by key; 0 on followers.", gauge, "key")
	mLimitRate    = newMetric("limit_rate", "Each key's limit: events per second across the fleet.", gauge, "key")
	mLimitBurst   = newMetric("limit_burst", "Each key's burst.", gauge, "key")
	mHorizon      = newMetric("horizon_ahead_seconds", "On the leader: how far the key's committed horizon reaches ahead of now.", gauge, "key")
	mBacklog      = newMetric("backlog_seconds", "On the leader: how far the key's pacing cursor is ahead of now (the wait of the next grant).", gauge, "key")
	mPause        = newMetric("pause_remaining_seconds", "Remaining pause of each paused key, as this node measures it.", gauge, "key")
	mSlotsInUse   = newMetric("slots_in_use", "Concurrency slots held under each key's cap, as this node knows them.", gauge, "key")
	mSlotsMax     = newMetric("slots_max", "Each key's concurrency cap.", gauge, "key")

	mMode     = newMetric("mode", "1 for the node's current admission mode (raft, local, pooled, stopped), 0 for the others.", gauge, "mode")
	mFraction = newMetric("fallback_fraction", "This node's committed fallback fraction of each key's rate.", gauge)
	mHeld     = newMetric("held_fraction", "On the leader: the part of each key's rate it may grant now (1 minus the fractions of members whose share it does not hold); 0 on other nodes.", gauge)

	mForwarded      = newMetric("forwarded_total", "Reservation and lease requests this node sent to the leader.", counter)
	mLateGrants     = newMetric("late_grants_total", "Grants and leases that arrived after their use-by and were asked for again.", counter)
	mFallbackGrants = newMetric("fallback_grants_total", "Reservations granted by this node's own fallback pacer (local or pooled).", counter)
	mForfeited      = newMetric("forfeited_total", "Reservations this node's callers could not use by their use-by and dropped.", counter)
	mLeases         = newMetric("leases_total", "Leases (runs of slots) this node received from the leader.", counter)
	mLeasedSlots    = newMetric("leased_slots_total", "Slots in the leases this node received.", counter)
	mExtensions     = newMetric("horizon_extensions_total", "Horizon entries this node committed as leader.", counter)
	mExtendErrors   = newMetric("horizon_extension_errors_total", "Horizon entries this node failed to commit as leader.", counter)
	mPausesCommit   = newMetric("pauses_total", "Pauses this node committed as leader.", counter)
	mSlotsReleased  = newMetric("slots_released_total", "Concurrency slots this node's callers gave back.", counter)
	mSlotsExpired   = newMetric("slots_expired_total", "Concurrency slots this node reclaimed at their TTL as leader.", counter)

	mIsLeader    = newMetric("raft_leader", "1 if this node is the raft leader and grants (past its barrier), else 0.", gauge)
	mHasLeader   = newMetric("raft_has_leader", "1 if this node knows a raft leader, else 0.", gauge)
	mTerm        = newMetric("raft_term", "The raft term this node is in.", gauge)
	mApplied     = newMetric("raft_applied_index", "The last raft log index this node applied.", gauge)
	mTransitions = newMetric("raft_leadership_transitions_total", "Times this node gained or lost raft leadership.", counter)
	mApply       = newMetric("raft_apply_seconds", "Time of each raft apply this node made as leader, until committed and applied here (or failed).", counter)
	mMembers     = newMetric("members", "Members in the raft configuration, as this node sees it.", gauge)
	mAlive       = newMetric("members_alive", "Members of the raft configuration that gossip reports alive.", gauge)

	mTAccepted   = newMetric("transport_accepted_total", "Inbound connections the transport admitted.", counter)
	mTRejected   = newMetric("transport_rejected_total", "Inbound connections the transport closed because they broke a rule (bad stream byte, too many connections, bad frame, no handshake).", counter)
	mTConnsIn    = newMetric("transport_connections_in", "Inbound connections open now (raft and RPC).", gauge)
	mTConnsOut   = newMetric("transport_connections_out", "Outbound connections open now (raft and RPC).", gauge)
	mTDials      = newMetric("transport_dials_total", "Outbound connection attempts.", counter)
	mTDialErrors = newMetric("transport_dial_errors_total", "Outbound connection attempts that failed.", counter)
	mTCallsIn    = newMetric("transport_calls_in_total", "RPC requests received.", counter)
	mTHandlerErr = newMetric("transport_handler_errors_total", "RPC requests whose handler returned an error.", counter)
	mTCallsOut   = newMetric("transport_calls_out_total", "RPC calls made.", counter)
	mTCallErrors = newMetric("transport_call_errors_total", "RPC calls that returned an error of any kind.", counter)
)

var all = []metric{
	mUp, mReady, mReservations, mEvents, mSlots, mWait, mAdmitted10, mGranted10, mLimitRate, mLimitBurst,
	mHorizon, mBacklog, mPause, mSlotsInUse, mSlotsMax, mMode, mFraction, mHeld,
	mForwarded, mLateGrants, mFallbackGrants, mForfeited, mLeases,
	mLeasedSlots, mExtensions, mExtendErrors, mPausesCommit, mSlotsReleased, mSlotsExpired,
	mIsLeader, mHasLeader, mTerm, mApplied, mTransitions, mApply, mMembers, mAlive,
	mTAccepted, mTRejected, mTConnsIn, mTConnsOut, mTDials, mTDialErrors, mTCallsIn, mTHandlerErr, mTCallsOut, mTCallErrors,
}

// Collector is a node's prometheus.Collector.
type Collector struct{ n Node }

// NewCollector returns the collector of n.
func NewCollector(n Node) *Collector { return &Collector{n: n} }

// Describe sends every metric's descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range all {
		ch <- m.desc
	}
}

// Collect reads the node and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(m metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, labels...)
	}
	hist := func(m metric, h report.Histogram) {
		buckets := make(map[float64]uint64, len(h.Bounds))
		for i, b := range h.Bounds {
			buckets[b] = h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(m.desc, h.Count, h.Sum, buckets)
	}

	nm := c.n.Metrics()
	for _, k := range nm.Keys {
		for _, o := range []string{report.OutcomeGranted, report.OutcomeRefused, report.OutcomePaused, report.OutcomeQuota, report.OutcomeUnknownKey, report.OutcomeError, report.OutcomeDryRun} {
			emit(mReservations, float64(k.Reservations[o]), k.Key, o)
		}
		emit(mEvents, float64(k.GrantedEvents), k.Key)
		var slots uint64
		for _, v := range k.Slots {
			slots += v
		}
		if slots > 0 {
			for _, o := range []string{report.OutcomeAcquired, report.OutcomeConcurrencyRefused, report.OutcomeUnknownKey, report.OutcomeError} {
				emit(mSlots, float64(k.Slots[o]), k.Key, o)
			}
		}
	}
	hist(mWait, nm.Wait)
	hist(mApply, nm.Apply)
	emit(mTransitions, float64(nm.LeadershipTransitions))
	t := nm.Transport
	emit(mTAccepted, float64(t.Accepted))
	emit(mTRejected, float64(t.Rejected))
	emit(mTConnsIn, float64(t.ConnsIn))
	emit(mTConnsOut, float64(t.ConnsOut))
	emit(mTDials, float64(t.Dials))
	emit(mTDialErrors, float64(t.DialErrors))
	emit(mTCallsIn, float64(t.CallsIn))
	emit(mTHandlerErr, float64(t.HandlerErrors))
	emit(mTCallsOut, float64(t.CallsOut))
	emit(mTCallErrors, float64(t.CallErrors))

	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	st, err := c.n.Status(ctx)
	if err != nil {
		emit(mUp, 0)
		emit(mReady, 0)
		return
	}
	emit(mUp, 1)
	ready, _ := st.Ready()
	emit(mReady, b2f(ready))
	for _, l := range st.Limits {
		emit(mLimitRate, l.Rate, l.Key)
		emit(mLimitBurst, float64(l.Burst), l.Key)
		emit(mAdmitted10, l.Admitted10s, l.Key)
		emit(mGranted10, l.Granted10s, l.Key)
		if st.Granting {
			emit(mHorizon, l.HorizonIn.Seconds(), l.Key)
			emit(mBacklog, l.Backlog.Seconds(), l.Key)
		}
	}
	for _, p := range st.Pauses {
		emit(mPause, p.Remaining.Seconds(), p.Key)
	}
	for _, cp := range st.Caps {
		emit(mSlotsInUse, float64(cp.InUse), cp.Key)
		emit(mSlotsMax, float64(cp.Max), cp.Key)
	}
	known := false
	for _, m := range Modes {
		emit(mMode, b2f(st.Mode == m), m)
		known = known || st.Mode == m
	}
	if !known {
		emit(mMode, 1, st.Mode)
	}
	emit(mFraction, st.Fraction)
	emit(mHeld, st.HeldFraction)
	s := st.Stats
	emit(mForwarded, float64(s.Forwarded))
	emit(mLateGrants, float64(s.LateGrants))
	emit(mFallbackGrants, float64(s.Fallback))
	emit(mForfeited, float64(s.Forfeited))
	emit(mLeases, float64(s.Leases))
	emit(mLeasedSlots, float64(s.LeasedSlots))
	emit(mExtensions, float64(s.Extensions))
	emit(mExtendErrors, float64(s.ExtendErrors))
	emit(mPausesCommit, float64(s.Pauses))
	emit(mSlotsReleased, float64(s.SlotsReleased))
	emit(mSlotsExpired, float64(s.SlotsExpired))
	emit(mIsLeader, b2f(st.Granting))
	emit(mHasLeader, b2f(st.Leader != ""))
	emit(mTerm, float64(st.Term))
	emit(mApplied, float64(st.AppliedIndex))
	members, alive := 0, 0
	for _, m := range st.Members {
		if m.Role == "none" {
			continue
		}
		members++
		if m.Health == "alive" {
			alive++
		}
	}
	emit(mMembers, float64(members))
	emit(mAlive, float64(alive))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
