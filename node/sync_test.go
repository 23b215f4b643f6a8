package node_test

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node/nodetest"
)

// Sync catches a node up with what the leader had committed: a read after
// it sees a limit set through another node.
func TestSync_ReadsAsFreshAsTheLeader(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 20*time.Second)
	for i := range 20 {
		lim := fsm.Limit{Rate: float64(i + 1), Burst: 1}
		if err := c.Node(c.Leader()).SetLimit(ctx, "k", lim); err != nil {
			t.Fatal(err)
		}
		for j := range c.Size() {
			if err := c.Node(j).Sync(ctx); err != nil {
				t.Fatalf("node %d: Sync: %v", j, err)
			}
			if got, err := c.Node(j).Limit(ctx, "k"); err != nil || got != lim {
				t.Fatalf("node %d after Sync: limit %+v, %v; want %+v", j, got, err, lim)
			}
		}
	}
}
