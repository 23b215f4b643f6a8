// Package tally is the counting machinery behind a raftpace node's
// monitoring: outcomes per key in a bounded table, fixed-bucket histograms
// of durations, and per-second event counts over the last HistorySeconds.
// Package node assembles its Metrics, History and Status from them.
//
// # What it promises
//
// Counting is cheap on the hot path: Keys and Histogram take a few atomic
// adds and no lock once a key is known (a key's first count takes one);
// History takes one short critical section per grant, not per event. Keys
// counts at most its bound of keys one by one and folds the rest under one
// other key, so the table cannot grow without bound. Histogram's snapshot
// is cumulative per bound, Prometheus style; its Count and Sum cover every
// observation, those above the last bound included. History counts by
// whole seconds of the clock it is given; Series leaves out the current,
// partial second, and a key's counts older than HistorySeconds are gone.
// Nothing here is package-global, and nothing reads a clock.
//
// # What it may depend on
//
// Nothing of the project: node gives it the bounds, the key limit and the
// times.
package tally
