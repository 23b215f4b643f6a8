package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

type stringer struct{ addr string }

func (s *stringer) String() string { return "Node at " + s.addr }

func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if strings.Count(l, `"node":`) > 1 {
			t.Errorf("key node twice: %s", l)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// TestHCLog: raft's logs through the adapter keep the node id, render
// hclog's formatting helpers and Stringers, and rename keys that would
// collide with the node's.
func TestHCLog(t *testing.T) {
	var b bytes.Buffer
	base := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", "n1")
	h := HCLog(base, "raft")
	var nilStringer *stringer
	h.Info("entering candidate state", "node", &stringer{"127.0.0.1:1"}, "term", 2)
	h.Warn("x", "servers", hclog.Fmt("%+v", []int{1, 2}), "time", 1500*time.Millisecond, "err", errors.New("boom"),
		"hex", hclog.Hex(255), "q", hclog.Quote("a b"), "nil", nilStringer)
	h.Named("snapshot").With("component", "store").Debug("y")
	ls := lines(t, &b)
	if len(ls) != 3 {
		t.Fatalf("%d lines", len(ls))
	}
	for _, l := range ls {
		if l["node"] != "n1" || l["component"] != "raft" {
			t.Errorf("line lost the node id or component: %v", l)
		}
	}
	if ls[0]["raft_node"] != "Node at 127.0.0.1:1" {
		t.Errorf("raft's own node argument: %v", ls[0])
	}
	want := map[string]any{"servers": "[1 2]", "raft_time": "1.5s", "err": "boom", "hex": "0xff", "q": `"a b"`}
	for k, v := range want {
		if ls[1][k] != v {
			t.Errorf("%s = %#v, want %#v (line %v)", k, ls[1][k], v, ls[1])
		}
	}
	if ls[1]["time"] == "1.5s" {
		t.Error("the record's time was overwritten")
	}
	if ls[2]["subsystem"] != "snapshot" || ls[2]["raft_component"] != "store" {
		t.Errorf("named/with: %v", ls[2])
	}
}

// TestStdLogger: memberlist's "[LEVEL] memberlist: ..." lines become
// records at that level with the logger's attributes.
func TestStdLogger(t *testing.T) {
	var b bytes.Buffer
	l := StdLogger(slog.New(slog.NewJSONHandler(&b, nil)).With("node", "n2", "component", "memberlist"))
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: n1)")
	l.Printf("[DEBUG] memberlist: dropped below the handler's level")
	ls := lines(t, &b)
	if len(ls) != 1 || ls[0]["level"] != "WARN" || ls[0]["node"] != "n2" || ls[0]["msg"] != "memberlist: Refuting a suspect message (from: n1)" {
		t.Errorf("%v", ls)
	}
}

// A node's first election (no last leader: every start) is routine, so
// raft's WARN for it is logged at INFO; an election after a leader was
// lost stays a warning.
func TestHCLog_FirstElectionIsInfo(t *testing.T) {
	var b bytes.Buffer
	h := HCLog(slog.New(slog.NewJSONHandler(&b, nil)), "raft")
	type serverAddress string // as raft's ServerAddress
	h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", serverAddress(""), "last-leader-id", "")
	h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", serverAddress("10.0.0.1:7400"), "last-leader-id", "n2")
	ls := lines(t, &b)
	if len(ls) != 2 || ls[0]["level"] != "INFO" || ls[1]["level"] != "WARN" {
		t.Fatalf("levels: %v", ls)
	}
}
