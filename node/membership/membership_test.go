package membership

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakeShares is share bookkeeping the test sets by hand: every member
// listed in overdue is overdue for any after up to its value.
type fakeShares struct {
	overdue  map[string]time.Duration
	releases map[string]int64
	silent   map[string]time.Duration // Silence: lapsed, silent this long
}

func (f *fakeShares) Rejoined(string)                             {}
func (f *fakeShares) CaughtUp(string, time.Duration, uint64) bool { return false }
func (f *fakeShares) Silence(id string) (time.Duration, bool) {
	d, ok := f.silent[id]
	return d, ok
}
func (f *fakeShares) Overdue(self string, after time.Duration) []string {
	var out []string
	for id, d := range f.overdue {
		if id != self && d >= after && f.releases[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}
func (f *fakeShares) Release(id string, from int64) { f.releases[id] = from }
func (f *fakeShares) Released(int64) []string       { return nil }
func (f *fakeShares) IsReleased(id string) bool     { return f.releases[id] != 0 }

func testMembership(cfg Config, d Deps) *Membership {
	cfg.NodeID = "self"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d.Now = func() int64 { return int64(time.Hour) }
	return &Membership{cfg: cfg, d: d, log: cfg.Logger, ctx: context.Background(), addedAt: make(map[string]time.Time)}
}

// Without a witness a member is reaped only once silent for ReapAfter, and
// its fraction counts from now; the leader never reaps itself.
func TestMembership_ReclaimReapsAfterReapAfter(t *testing.T) {
	sh := &fakeShares{overdue: map[string]time.Duration{"a": time.Minute, "b": 2 * time.Minute, "self": time.Hour}, releases: map[string]int64{}}
	m := testMembership(Config{ReapAfter: 90 * time.Second}, Deps{Shares: sh})
	m.reclaim(map[string]time.Time{})
	if len(sh.releases) != 1 || sh.releases["b"] != int64(time.Hour) {
		t.Fatalf("releases = %v, want b alone, from now", sh.releases)
	}
}

// With a witness a member's fraction comes back only when the witness
// fences it, from the answer plus its Wait and UseGrace; a member it still
// hears from, or a witness that does not answer, keeps it. A member is not
// asked about more often than every WitnessTTL/3.
func TestMembership_ReclaimFencesThroughTheWitness(t *testing.T) {
	// "new" joined 100ms ago and has not been renewed yet: not silent for
	// ShareTTL, so not fenced (the witness has not heard from it yet
	// either, and would say so).
	sh := &fakeShares{overdue: map[string]time.Duration{"alive": 2 * time.Second, "down": 2 * time.Second, "gone": 2 * time.Second, "new": 100 * time.Millisecond}, releases: map[string]int64{}}
	asked := map[string]int{}
	fence := func(_ context.Context, id string) (FenceResult, error) {
		asked[id]++
		switch id {
		case "alive":
			return FenceResult{Reason: "seen 300ms ago"}, nil
		case "down":
			return FenceResult{}, errors.New("postgres down")
		}
		return FenceResult{Fenced: true, Wait: 2 * time.Second}, nil
	}
	m := testMembership(Config{WitnessTTL: 3 * time.Second, ShareTTL: time.Second, UseGrace: 100 * time.Millisecond, ReapAfter: time.Nanosecond},
		Deps{Shares: sh, Fence: fence})
	lastTry := map[string]time.Time{}
	m.reclaim(lastTry)
	if len(sh.releases) != 1 || sh.releases["gone"] != int64(time.Hour+2100*time.Millisecond) {
		t.Fatalf("releases = %v, want gone alone, from now + Wait + UseGrace", sh.releases)
	}
	m.reclaim(lastTry)
	if asked["new"] != 0 {
		t.Fatalf("the witness was asked to fence a member added %v ago, before ShareTTL", sh.overdue["new"])
	}
	if asked["alive"] != 1 || asked["down"] != 1 {
		t.Fatalf("asked = %v: the witness was asked again within WitnessTTL/3", asked)
	}
}

// Unsafe.ReclaimWithoutFence takes a fraction back after ShareTTL + 1s,
// asking no witness.
func TestMembership_ReclaimUnsafe(t *testing.T) {
	sh := &fakeShares{overdue: map[string]time.Duration{"a": 2 * time.Second, "b": 500 * time.Millisecond}, releases: map[string]int64{}}
	fence := func(context.Context, string) (FenceResult, error) {
		t.Fatal("asked the witness")
		return FenceResult{}, nil
	}
	m := testMembership(Config{UnsafeReclaim: true, ShareTTL: time.Second}, Deps{Shares: sh, Fence: fence})
	m.reclaim(map[string]time.Time{})
	if len(sh.releases) != 1 || sh.releases["a"] != int64(time.Hour) {
		t.Fatalf("releases = %v, want a alone", sh.releases)
	}
}

// memberlist's lines about encryption get the gossip key hint; others
// pass unchanged.
func TestMembership_GossipKeyHint(t *testing.T) {
	var buf bytes.Buffer
	h := &gossipKeyHint{w: &buf}
	line := "[ERR] memberlist: failed to decrypt remote state\n"
	if n, err := h.Write([]byte(line)); err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if !strings.Contains(buf.String(), KeyHint) {
		t.Fatalf("no hint in %q", buf.String())
	}
	buf.Reset()
	other := "[DEBUG] memberlist: stream connection\n"
	if _, err := h.Write([]byte(other)); err != nil || buf.String() != other {
		t.Fatalf("passed on %q, want %q unchanged", buf.String(), other)
	}
}

// A member added to raft again after it was removed as failed is not
// removed again before FailedServerAfter has passed since the add,
// however long it was silent: it needs that time to answer a renewal.
// (Removing it would take raft; with no raft here, a removal panics.)
func TestMembership_JustAddedMemberIsNotFailed(t *testing.T) {
	sh := &fakeShares{silent: map[string]time.Duration{"n1": 20 * time.Second}}
	m := testMembership(Config{NodeID: "n2", FailedServerAfter: 3 * time.Second}, Deps{Shares: sh})
	m.addedAt["n1"] = time.Now()
	servers := []raft.Server{{ID: "n1", Suffrage: raft.Nonvoter}, {ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Voter}}
	left, err := m.removeFailed(servers)
	if err != nil || len(left) != 3 {
		t.Fatalf("removeFailed = %v, %v; want all three kept", left, err)
	}
	m.addedAt["n1"] = time.Now().Add(-4 * time.Second)
	func() {
		defer func() { _ = recover() }() // the removal reaches for raft: it was attempted
		_, _ = m.removeFailed(servers)
	}()
	if _, still := m.addedAt["n1"]; still {
		t.Fatal("an add older than FailedServerAfter was kept")
	}
}
