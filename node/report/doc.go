// Package report holds the shapes of what a raftpace node reports: its
// view of the cluster (Status, with its members, limits, pauses and caps),
// its counters (Stats) and its monitoring snapshot (Metrics, with its
// per-key counts and histograms). Package node builds them; the readers of
// a node's state (the agent's admin API and its client, the status page,
// the Prometheus collector, the command's tables, the tests) read them
// without importing node.
//
// # What it promises
//
// Plain data, with no behaviour beyond Status.Ready: no goroutine, no
// clock, no lock, nothing package-global but constants. The JSON names of
// every field are the admin API's (GET /v1/status) and the status page's,
// and do not change. The constants name the values some fields take: the
// modes of a node (ModeRaft...), the modes of a member as the leader sees
// it (MemberRaft...), the outcomes a key's counts are kept under
// (OutcomeGranted...) and the key the counts of keys past MaxCountedKeys
// fold into (OtherKeys). A node's modes are those of package node/fallback
// under their String names; node's tests hold the two to the same
// spelling.
//
// # What it may depend on
//
// The standard library only: it imports nothing of the project, so any
// reader may import it, and node imports it, never the other way round.
// Metrics.Transport is a TransportStats, a copy of package transport's
// Stats that converts from it (node converts; a field added there and not
// here fails to compile).
package report
