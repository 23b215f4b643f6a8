package node_test

import (
	"testing"

	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/report"
)

// TestStatusModes holds package node/report's mode names, which Status.Ready
// and the readers of a status compare Status.Mode with, to the names
// node's modes print as (Status.Mode is Mode.String()).
func TestStatusModes(t *testing.T) {
	for m, want := range map[node.Mode]string{
		node.ModeRaft:    report.ModeRaft,
		node.ModeLocal:   report.ModeLocal,
		node.ModePooled:  report.ModePooled,
		node.ModeStopped: report.ModeStopped,
	} {
		if got := m.String(); got != want {
			t.Errorf("mode %d prints as %q, node/report names it %q", int32(m), got, want)
		}
	}
}
