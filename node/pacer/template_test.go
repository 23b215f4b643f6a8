package pacer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
)

// statePacer is a leading pacer whose limits come from a real fsm.State
// (so templates resolve as on a node) and whose tracked horizons are the
// map horizons, on the clock *clock.
func statePacer(t *testing.T, st *fsm.State, horizons map[string]int64, clock *int64) *Pacer {
	t.Helper()
	p := New(func() int64 { return *clock }, time.Second, 20*time.Millisecond,
		func(k string) (int64, bool) { h, ok := horizons[k]; return h, ok },
		st.Limit)
	if !p.Lead(p.StepDown()) {
		t.Fatal("pacer did not lead")
	}
	return p
}

func apply(t *testing.T, st *fsm.State, c fsm.Command) {
	t.Helper()
	if err := st.Apply(st.AppliedIndex()+1, c); err != nil {
		t.Fatal(err)
	}
}

// commitAll commits every pending extension as raft would, at once.
func commitAll(p *Pacer) {
	for {
		ext, ok := p.Collect()
		if !ok {
			return
		}
		p.Committed(ext)
	}
}

// A key covered by a template is granted at the template's rate with no
// command of its own, follows a change of the template, and a key covered
// by nothing is refused and leaves nothing behind.
func TestPacer_TemplateKeys(t *testing.T) {
	st := fsm.New()
	apply(t, st, fsm.SetLimit{Key: "tenant:*", Limit: fsm.Limit{Rate: 10, Burst: 1}})
	var clock int64 = 1e12
	p := statePacer(t, st, nil, &clock)
	ctx := context.Background()

	// The first request waits for the new key's first horizon.
	if _, err := reserve(t, p, "tenant:1", time.Second); err != nil {
		t.Fatalf("first reservation of a template's key: %v", err)
	}
	// 10/s: the next is 100 ms away.
	if wait, err := reserve(t, p, "tenant:1", time.Second); err != nil || wait != 100*time.Millisecond {
		t.Fatalf("second reservation: wait %v, %v; want 100ms", wait, err)
	}
	// The template slows to 1/s: the key follows at once (TAT +200 ms, then
	// one second per event).
	apply(t, st, fsm.SetLimit{Key: "tenant:*", Limit: fsm.Limit{Rate: 1, Burst: 1}})
	p.LimitChanged("tenant:*")
	if wait, err := reserve(t, p, "tenant:1", 2*time.Second); err != nil || wait != 200*time.Millisecond {
		t.Fatalf("after the template's change: wait %v, %v; want 200ms", wait, err)
	}
	if wait, err := reserve(t, p, "tenant:1", 2*time.Second); err != nil || wait != 1200*time.Millisecond {
		t.Fatalf("after the template's change: wait %v, %v; want 1.2s", wait, err)
	}
	// An explicit limit beats the template.
	apply(t, st, fsm.SetLimit{Key: "tenant:1", Limit: fsm.Limit{Rate: 1000, Burst: 1}})
	p.LimitChanged("tenant:1")
	p.mu.Lock()
	got := p.keys["tenant:1"].limit
	p.mu.Unlock()
	if got.Rate != 1000 {
		t.Errorf("key with its own limit paced at %v/s, want 1000/s", got.Rate)
	}

	_, _, err := p.Reserve(ctx, nil, "other", 1, time.Second)
	if !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Fatalf("key covered by nothing: %v, want ErrUnknownKey", err)
	}
	p.mu.Lock()
	_, kept := p.keys["other"]
	p.mu.Unlock()
	if kept {
		t.Error("a refused unknown key stays in the pacer")
	}
}

// An idle key leaves the pacer after IdleAfter, and its horizon leaves the
// state by an entry with Ahead 0; a busy key, or one whose TAT is still
// ahead, stays. Used again, it starts at the horizon this node tracks.
func TestPacer_IdleKeysAreForgotten(t *testing.T) {
	st := fsm.New()
	apply(t, st, fsm.SetLimit{Key: "tenant:*", Limit: fsm.Limit{Rate: 1, Burst: 1}})
	var clock int64 = 1e12
	horizons := map[string]int64{"tenant:idle": clock + int64(time.Second)}
	p := statePacer(t, st, horizons, &clock)
	p.IdleAfter = 10 * time.Second

	for _, key := range []string{"tenant:idle", "tenant:busy", "tenant:queued"} {
		if _, err := reserve(t, p, key, 2*time.Second); err != nil { // idle starts at its tracked horizon, +1 s
			t.Fatalf("reserve %s: %v", key, err)
		}
	}
	commitAll(p)

	clock += int64(11 * time.Second)
	p.mu.Lock()
	p.keys["tenant:busy"].seen = clock                       // asked just now
	p.keys["tenant:queued"].tat = clock + int64(time.Second) // slots granted past now
	p.mu.Unlock()
	ext, ok := p.Collect()
	if !ok {
		t.Fatal("no entry for the idle key")
	}
	var forgot []string
	for _, e := range ext.Cmd.Entries {
		if e.Ahead == 0 {
			forgot = append(forgot, e.Key)
		}
	}
	if len(forgot) != 1 || forgot[0] != "tenant:idle" {
		t.Errorf("forgotten (Ahead 0) = %q, want [tenant:idle] (tenant:queued's TAT is ahead; the others' horizons are not tracked)", forgot)
	}
	p.mu.Lock()
	_, idle := p.keys["tenant:idle"]
	_, busy := p.keys["tenant:busy"]
	_, queued := p.keys["tenant:queued"]
	p.mu.Unlock()
	if idle || !busy || !queued {
		t.Errorf("in memory after Collect: idle %v busy %v queued %v; want false true true", idle, busy, queued)
	}
	p.Committed(ext)

	// Back in use, before the forget is applied here: it starts at the
	// horizon this node tracks, never before.
	horizons["tenant:idle"] = clock + int64(300*time.Millisecond)
	if w, err := reserve(t, p, "tenant:idle", time.Second); err != nil || w < 300*time.Millisecond {
		t.Errorf("a forgotten key used again: wait %v, %v; want at least its tracked horizon's 300ms", w, err)
	}
}

// reserve reserves one event of key, committing the horizon extensions it
// waits for as the node's extender would.
func reserve(t *testing.T, p *Pacer, key string, maxWait time.Duration) (time.Duration, error) {
	t.Helper()
	type result struct {
		wait time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		w, _, err := p.Reserve(context.Background(), nil, key, 1, maxWait)
		done <- result{w, err}
	}()
	for {
		select {
		case r := <-done:
			return r.wait, r.err
		case <-p.Kicks():
			commitAll(p)
		case <-time.After(5 * time.Second):
			t.Fatalf("reserve %s: no answer in 5 s", key)
		}
	}
}
