package pglink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// These tests need no Postgres: they drive the link's decisions with fake
// Deps. The calls to Postgres are tested in package node (postgres_test.go)
// and internal/pgstore.

func testLink(t *testing.T, st *fsm.State, now int64) (*Link, *[]fsm.Command, map[string]int64) {
	t.Helper()
	var committed []fsm.Command
	pauses := map[string]int64{}
	commit := func(c fsm.Command) (uint64, error) { committed = append(committed, c); return 1, nil }
	l := New(Config{NodeID: "a", CheckpointEvery: time.Second}, Deps{
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        func() int64 { return now },
		Ctx:        context.Background(),
		Addr:       func() string { return "127.0.0.1:1" },
		GossipAddr: func() string { return "127.0.0.1:2" },
		State:      st,
		Horizon:    func(string) (int64, bool) { return 0, false },
		Pause:      func(key string) (int64, bool) { e, ok := pauses[key]; return e, ok },
		Pauses:     func() map[string]int64 { return pauses },
		PauseMu:    &sync.Mutex{},
		HorizonsIn: func() map[string]time.Duration { return map[string]time.Duration{"late": 3 * time.Second} },
		Granting:   func() bool { return true },
		SameGen:    func(uint64) bool { return true },
		FreshStart: func() bool { return false },
		Commit:     commit,
		CommitWithin: func(c fsm.Command, _ time.Duration) (uint64, error) {
			return commit(c)
		},
		SetLimit: func(key string, lim fsm.Limit) (uint64, error) {
			return commit(&fsm.SetLimit{Key: key, Limit: lim})
		},
		Sleep: func(context.Context, time.Duration) error { return nil },
	})
	return l, &committed, pauses
}

func apply(t *testing.T, st *fsm.State, cs ...fsm.Command) {
	t.Helper()
	for _, c := range cs {
		if err := st.Apply(st.AppliedIndex()+1, c); err != nil {
			t.Fatalf("apply %T: %v", c, err)
		}
	}
}

// The checkpoint holds each key's horizon as the later of this node's
// measured one and the pacer's committed one, capped at MaxHorizonAhead,
// and only the pauses still running, capped at MaxPause.
func TestCheckpointState(t *testing.T) {
	st := fsm.New()
	apply(t, st,
		&fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 10, Burst: 1}},
		&fsm.SetCap{Key: "c", Max: 3},
		&fsm.ExtendHorizons{Entries: []fsm.HorizonEntry{{Key: "early", Ahead: time.Second}, {Key: "late", Ahead: time.Second}}},
	)
	const now = int64(100 * time.Second)
	l, _, pauses := testLink(t, st, now)
	hz := map[string]int64{"early": now + int64(2*time.Second), "late": now + int64(time.Second)}
	l.d.Horizon = func(key string) (int64, bool) { h, ok := hz[key]; return h, ok }
	pauses["over"] = now - 1
	pauses["on"] = now + int64(5*time.Second)

	cp := l.checkpoint()
	if cp.Limits["k"] != (fsm.Limit{Rate: 10, Burst: 1}) || cp.Caps["c"] != 3 {
		t.Errorf("limits %v caps %v", cp.Limits, cp.Caps)
	}
	if cp.Horizons["early"] != 2*time.Second || cp.Horizons["late"] != 3*time.Second {
		t.Errorf("horizons %v, want early 2s (measured), late 3s (pacer's)", cp.Horizons)
	}
	if _, ok := cp.Pauses["over"]; ok || cp.Pauses["on"] != 5*time.Second {
		t.Errorf("pauses %v, want only on: 5s", cp.Pauses)
	}
}

// A restored pause never shortens a longer one already in force.
func TestRestorePausesKeepsLonger(t *testing.T) {
	const now = int64(10 * time.Second)
	l, committed, pauses := testLink(t, fsm.New(), now)
	pauses["long"] = now + int64(time.Minute)
	n, err := l.restorePauses(map[string]time.Duration{"long": time.Second, "new": 2 * time.Second})
	if err != nil || n != 1 {
		t.Fatalf("restorePauses = %d, %v; want 1, nil", n, err)
	}
	if len(*committed) != 1 || (*committed)[0].(*fsm.SetPause).Key != "new" {
		t.Errorf("committed %v, want only the pause of new", *committed)
	}
}

// A node that did not start empty, or whose state is not empty, leads at
// once without calling Postgres.
func TestRestoreBeforeLeadingNotFresh(t *testing.T) {
	l, committed, _ := testLink(t, fsm.New(), 0)
	if !l.RestoreBeforeLeading(1) || len(*committed) != 0 {
		t.Fatalf("not fresh: want leading at once, nothing committed")
	}
	st := fsm.New()
	apply(t, st, &fsm.SetLimit{Key: "k", Limit: fsm.Limit{Rate: 1, Burst: 1}})
	l, committed, _ = testLink(t, st, 0)
	l.d.FreshStart = func() bool { return true }
	if !l.RestoreBeforeLeading(1) || len(*committed) != 0 {
		t.Fatalf("fresh but with limits: want leading at once, nothing committed")
	}
}

// URLProblem never shows the password of a URL it cannot parse.
func TestURLProblemMasksPassword(t *testing.T) {
	if msg := URLProblem("postgres://u:secret@localhost:5432/db"); msg != "" {
		t.Fatalf("a valid URL: %q", msg)
	}
	for raw, shown := range map[string]string{
		"postgres://u:s3cr%21t@localhost:notaport/db":  "near s3cr%21t and s3cr!t",
		"host=localhost password=s3cr!t port=notaport": "near s3cr!t",
	} {
		msg := URLProblem(raw)
		if msg == "" {
			t.Errorf("%q: no problem reported", raw)
		}
		if strings.Contains(msg, "s3cr") {
			t.Errorf("%q: message shows the password: %q", raw, msg)
		}
		if m := maskPasswords(shown, raw); strings.Contains(m, "s3cr") {
			t.Errorf("%q: maskPasswords left the password in %q", raw, m)
		}
	}
}

// The link says what Postgres did each time that changes, the first time
// included: unreachable (a warning), refusing the node's statements (an
// error: a missing database, a user refused), reachable again. An answer
// that refuses a request (fenced, no pool) is Postgres reachable.
func TestNoteSaysEachChangeOfReach(t *testing.T) {
	l, _, _ := testLink(t, fsm.New(), 0)
	var buf strings.Builder
	l.d.Log = slog.New(slog.NewTextHandler(&buf, nil))
	down := fmt.Errorf("pgstore: open: %w: connection refused", pgstore.ErrUnavailable)
	missing := errors.New(`pgstore: open: server error: FATAL: database "x" does not exist (SQLSTATE 3D000)`)
	steps := []struct {
		err  error
		want string // the line logged, "" for none
	}{
		{down, "level=WARN msg=\"postgres unreachable"},
		{down, ""},
		{missing, "level=ERROR msg=\"postgres refuses this node's statements"},
		{missing, ""},
		{nil, "level=INFO msg=\"postgres reachable\""},
		{pgstore.ErrFenced, ""},
		{down, "level=WARN msg=\"postgres unreachable"},
	}
	for i, s := range steps {
		buf.Reset()
		l.note(s.err)
		got := buf.String()
		if (s.want == "") != (got == "") || !strings.Contains(got, s.want) {
			t.Errorf("step %d (%v): logged %q, want %q", i, s.err, got, s.want)
		}
		if reachable := s.err == nil || errors.Is(s.err, pgstore.ErrFenced); l.Reachable() != reachable {
			t.Errorf("step %d (%v): Reachable() = %v", i, s.err, !reachable)
		}
	}
}
