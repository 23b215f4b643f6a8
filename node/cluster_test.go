package node_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

func roles(t *testing.T, n *node.Node) map[string]string {
	t.Helper()
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, m := range st.Members {
		out[m.ID] = m.Role
	}
	return out
}

func countRoles(r map[string]string) (voters, nonvoters int) {
	for _, role := range r {
		switch role {
		case "voter":
			voters++
		case "nonvoter":
			nonvoters++
		}
	}
	return
}

// Five nodes bootstrapped together with the default voter target: three
// voters, two nonvoters.
func TestCluster_NodesBeyondVoterTargetAreNonvoters(t *testing.T) {
	c := nodetest.New(t, 5)
	leader := c.Node(c.Leader())
	waitFor(t, 15*time.Second, func() bool {
		v, nv := countRoles(roles(t, leader))
		return v == 3 && nv == 2
	})
}

// A node started later joins through gossip and is added by the leader (as
// a nonvoter: the three voters are there); when a voter leaves, the
// nonvoter is promoted.
func TestCluster_JoinAndLeave(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	if err := c.Node(0).SetLimit(ctx, "k", fsm.Limit{Rate: 100, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	extra, err := node.New(node.Config{
		NodeID:         "n4",
		DataDir:        filepath.Join(t.TempDir(), "n4"),
		BindAddr:       "127.0.0.1:0",
		GossipBindAddr: "127.0.0.1:0",
		Timing:         node.FastTiming(),
		HorizonAhead:   300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { extra.Close() })
	if _, err := extra.Join(ctx, []string{c.Node(1).GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return roles(t, c.Node(c.Leader()))["n4"] == "nonvoter" })
	// The new node has the cluster's state and can reserve.
	waitFor(t, 10*time.Second, func() bool {
		_, err := extra.Limit(ctx, "k")
		return err == nil
	})
	if _, err := extra.Reserve(ctx, "k", 1, time.Second); err != nil {
		t.Fatalf("reserve on joined node: %v", err)
	}

	// A follower voter leaves: it is removed and n4 becomes a voter.
	var leaving int
	for _, i := range c.Followers() {
		leaving = i
		break
	}
	leavingID := c.Node(leaving).ID()
	if err := c.Node(leaving).Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	c.Kill(leaving) // already closed by Leave; keeps the harness in step
	var last map[string]string
	deadline := time.Now().Add(20 * time.Second)
	for {
		last = roles(t, c.Node(c.Leader()))
		if _, still := last[leavingID]; !still && last["n4"] == "voter" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s left: roles %v, want it gone and n4 a voter", leavingID, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A joining node with a bad address is refused with an error naming it.
func TestCluster_JoinBadAddress(t *testing.T) {
	c := nodetest.New(t, 1)
	ctx := nodetest.Ctx(t, 10*time.Second)
	for _, addrs := range [][]string{nil, {"no-port"}, {"127.0.0.1:notaport"}} {
		if _, err := c.Node(0).Join(ctx, addrs); err == nil {
			t.Errorf("Join(%v) accepted", addrs)
		}
	}
}
