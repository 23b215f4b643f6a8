// Package node is a raftpace node: the part of a worker process that joins
// the fleet's cluster and grants it permission to send events, so that the
// whole fleet keeps one rate per key.
//
// A node runs hashicorp/raft (raft-boltdb/v2 stores in Config.DataDir) and
// hashicorp/memberlist (discovery and failure detection), both over loopback
// or LAN addresses it is given, and one TCP port (package transport) that
// carries raft and the nodes' own RPCs. The raft leader paces every key with
// GCRA in memory and grants only slots below a per-key horizon that it
// commits through raft ahead of need, in batches; followers forward their
// callers' reservations to it.
//
// # What it promises
//
// For a key with rate R and burst B, across all nodes, any window of length
// W admits at most R*W + B + R*UseGrace events (see Config.UseGrace). This
// holds across leader changes: a new leader starts each key at the horizon
// it inherited, measured from its own apply times, never from another
// host's clock. Keys without a limit are refused (ErrUnknownKey).
//
// # Use
//
//	n, err := node.New(node.Config{NodeID: "w1", DataDir: dir,
//		BindAddr: "10.0.0.1:7400", GossipBindAddr: "10.0.0.1:7401",
//		BootstrapExpect: 3, Join: []string{"10.0.0.2:7401"}})
//	if err != nil { ... }
//	defer n.Close()
//	r, err := n.Reserve(ctx, "image-host", 1, time.Second)
//	// sleep until r.At; use the event no later than r.UseBy
//
// Most callers want package client, whose Wait does the sleeping and the
// use-by check. DESIGN.md beside this file states the invariants.
package node
