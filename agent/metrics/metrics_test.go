package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/nodetest"
	"github.com/raftpace/raftpace/node/report"
)

// scrape GETs /metrics from h and parses the text exposition.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	return fams
}

// value returns the value of the sample of name whose labels include
// labels (name=value pairs); ok false if there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func want(t *testing.T, fams map[string]*dto.MetricFamily, name string, w float64, labels ...string) {
	t.Helper()
	v, ok := value(fams, name, labels...)
	if !ok {
		t.Errorf("%s%v: missing", name, labels)
		return
	}
	if v != w {
		t.Errorf("%s%v = %v, want %v", name, labels, v, w)
	}
}

// TestCollector_Node drives every reservation and slot outcome on a real
// one-node cluster and reads them back from the exposition.
func TestCollector_Node(t *testing.T) {
	c := nodetest.New(t, 1)
	n := c.Node(0)
	ctx := nodetest.Ctx(t, 30*time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.SetLimit(ctx, "k", fsm.Limit{Rate: 1000, Burst: 3}))
	must(n.SetLimit(ctx, "slow", fsm.Limit{Rate: 0.01, Burst: 1}))
	must(n.SetLimit(ctx, "held", fsm.Limit{Rate: 100, Burst: 1}))
	must(n.SetCap(ctx, "cap", 1))

	const grants = 7
	for range grants {
		_, err := n.Reserve(ctx, "k", 1, time.Second)
		must(err)
	}
	_, err := n.Reserve(ctx, "k", 3, time.Second) // 3 events in one reservation
	must(err)
	_, err = n.Reserve(ctx, "slow", 1, time.Second)
	must(err)
	if _, err := n.Reserve(ctx, "slow", 1, 0); !errors.Is(err, raftpace.ErrLimitExceeded) {
		t.Fatalf("second reservation of slow: %v, want ErrLimitExceeded", err)
	}
	if _, err := n.Reserve(ctx, "nope", 1, time.Second); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	_, err = n.Pause(ctx, "held", 30*time.Second)
	must(err)
	var pe *raftpace.PausedError
	if _, err := n.Reserve(ctx, "held", 1, 0); !errors.As(err, &pe) {
		t.Fatalf("paused key: %v", err)
	}
	s, err := n.AcquireSlots(ctx, []string{"cap"}, 10*time.Second, 0)
	must(err)
	if _, err := n.AcquireSlots(ctx, []string{"cap"}, 10*time.Second, 0); !errors.Is(err, raftpace.ErrConcurrencyLimit) {
		t.Fatalf("second slot: %v", err)
	}
	_ = s

	fams := scrape(t, Handler(n))
	want(t, fams, "raftpace_status_up", 1)
	want(t, fams, "raftpace_ready", 1)
	want(t, fams, "raftpace_reservations_total", grants+1, "key", "k", "outcome", "granted")
	want(t, fams, "raftpace_granted_events_total", grants+3, "key", "k")
	want(t, fams, "raftpace_reservations_total", 0, "key", "k", "outcome", "refused")
	want(t, fams, "raftpace_reservations_total", 1, "key", "slow", "outcome", "granted")
	want(t, fams, "raftpace_reservations_total", 1, "key", "slow", "outcome", "refused")
	want(t, fams, "raftpace_reservations_total", 1, "key", "nope", "outcome", "unknown_key")
	want(t, fams, "raftpace_reservations_total", 1, "key", "held", "outcome", "paused")
	want(t, fams, "raftpace_reservations_total", 0, "key", "held", "outcome", "refused")
	want(t, fams, "raftpace_slot_acquisitions_total", 1, "key", "cap", "outcome", "acquired")
	want(t, fams, "raftpace_slot_acquisitions_total", 1, "key", "cap", "outcome", "concurrency_refused")
	want(t, fams, "raftpace_reservation_wait_seconds", grants+2) // sample count: every grant
	want(t, fams, "raftpace_limit_rate", 1000, "key", "k")
	want(t, fams, "raftpace_limit_burst", 3, "key", "k")
	want(t, fams, "raftpace_slots_in_use", 1, "key", "cap")
	want(t, fams, "raftpace_slots_max", 1, "key", "cap")
	want(t, fams, "raftpace_mode", 1, "mode", "raft")
	want(t, fams, "raftpace_mode", 0, "mode", "local")
	want(t, fams, "raftpace_mode", 0, "mode", "stopped")
	want(t, fams, "raftpace_raft_leader", 1)
	want(t, fams, "raftpace_raft_has_leader", 1)
	// The fraction becomes 1 at the leader's first balancing round; it may
	// not have run yet.
	if v, ok := value(fams, "raftpace_fallback_fraction"); !ok || v < 0 || v > 1 {
		t.Errorf("fallback fraction: %v %v", v, ok)
	}
	want(t, fams, "raftpace_held_fraction", 1)
	want(t, fams, "raftpace_members", 1)
	want(t, fams, "raftpace_members_alive", 1)
	if v, _ := value(fams, "raftpace_pause_remaining_seconds", "key", "held"); v < 20 || v > 30 {
		t.Errorf("pause remaining of held: %v, want 20-30 s", v)
	}
	if v, _ := value(fams, "raftpace_raft_leadership_transitions_total"); v < 1 {
		t.Errorf("leadership transitions: %v, want >= 1", v)
	}
	if v, _ := value(fams, "raftpace_raft_apply_seconds"); v < 5 {
		t.Errorf("raft applies timed: %v, want >= 5 (limits, cap, pause, slot, horizons)", v)
	}
	if v, _ := value(fams, "raftpace_horizon_extensions_total"); v < 1 {
		t.Errorf("horizon extensions: %v", v)
	}
	if _, ok := value(fams, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}
	// Every raftpace metric has a help text and only the documented labels.
	var names []string
	for name, f := range fams {
		if !strings.HasPrefix(name, "raftpace_") {
			continue
		}
		names = append(names, name)
		if f.GetHelp() == "" {
			t.Errorf("%s: no help", name)
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if l := lp.GetName(); l != "key" && l != "outcome" && l != "mode" {
					t.Errorf("%s: label %q", name, l)
				}
			}
		}
	}
	sort.Strings(names)
	t.Logf("%d raftpace metrics: %s", len(names), strings.Join(names, " "))
}

// fakeNode fails its status: the counters are still exported.
type fakeNode struct{ m report.Metrics }

func (f fakeNode) Status(context.Context) (report.Status, error) {
	return report.Status{}, errors.New("boom")
}
func (f fakeNode) Metrics() report.Metrics { return f.m }

func TestCollector_StatusFails(t *testing.T) {
	f := fakeNode{m: report.Metrics{
		Keys: []report.KeyCounts{{Key: "a", Reservations: map[string]uint64{report.OutcomeGranted: 4, report.OutcomeRefused: 2}, GrantedEvents: 4}},
		Wait: report.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{3, 4}, Count: 4, Sum: 0.9},
	}}
	fams := scrape(t, Handler(f))
	want(t, fams, "raftpace_status_up", 0)
	want(t, fams, "raftpace_ready", 0)
	want(t, fams, "raftpace_reservations_total", 4, "key", "a", "outcome", "granted")
	want(t, fams, "raftpace_reservations_total", 2, "key", "a", "outcome", "refused")
	want(t, fams, "raftpace_reservation_wait_seconds", 4)
	if _, ok := fams["raftpace_slot_acquisitions_total"]; ok {
		t.Error("slot outcomes exported for a key never acquired")
	}
	h := fams["raftpace_reservation_wait_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleSum() != 0.9 || h.GetBucket()[0].GetCumulativeCount() != 3 || h.GetBucket()[0].GetUpperBound() != 0.1 {
		t.Errorf("wait histogram: %v", h)
	}
}

// TestRegistriesArePrivate: two nodes' registries in one process do not
// collide (nothing is registered globally).
func TestRegistriesArePrivate(t *testing.T) {
	a := NewRegistry(fakeNode{})
	b := NewRegistry(fakeNode{})
	if a == b {
		t.Fatal("same registry")
	}
	if _, err := a.Gather(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Gather(); err != nil {
		t.Fatal(err)
	}
}
