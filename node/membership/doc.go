// Package membership is who belongs to a raftpace cluster: the gossip that
// finds and watches the nodes (hashicorp/memberlist), the first raft
// configuration (BootstrapExpect), and the leader's policy that makes
// raft's configuration follow gossip and takes back the fallback fraction
// of members that left, failed or were fenced (node/DESIGN.md, "Membership"
// and "Membership churn").
//
// # What it promises
//
//   - Every node of a cluster that bootstraps computes the same first
//     configuration, and none bootstraps once any member holds state or
//     knows a leader.
//   - On the leader (Deps.Leading): a live gossip member missing from raft
//     is added as a nonvoter (after a connection check under TLS, or once
//     it answers if it was removed as failed); nonvoters that answer
//     renewals and have caught up are promoted while voters are missing; a
//     member silent for FailedServerAfter leaves raft while the quorum
//     holds; every raft server is in the replicated member list.
//   - A member's fraction comes back only by a release: Departed (it left),
//     a fence the witness accepted, or reaping after ReapAfter; and a
//     released member is forgotten only once its release time has passed.
//     Removal from raft never returns a fraction by itself.
//
// # What it may depend on
//
// raft, memberlist, package fsm (the commands it commits), node/wire (the
// departure request and its errors), package raftpace's errors and
// internal/logging. Never on package node: the node hands it what it needs
// in Config (values of its configuration) and Deps (its raft, its address,
// clock, commit, member list, the shares' bookkeeping, the Postgres
// witness), so that the pacing, shares and fallback stay the node's and
// membership only decides who is in. The policy (reconcile, reclaim,
// bootstrap) runs in its own loops, apart from the gossip mechanism
// (gossip.go), in the shape of Consul's autopilot.
package membership
