// Package load is what a load generator leaves behind: per key, how its
// reservation calls went (counts of calls, admissions, sheds and errors,
// and latency percentiles read from a Histogram). raftpace agent
// --load-report and raftpace bench-worker write a Report as JSON when
// they exit; the bench reads it back with ReadReport.
//
// It promises a JSON form that both sides agree on (the field tags are the
// format) and a Histogram whose percentiles are within 1/64 (1.6%) of the
// true value and whose Record is safe for concurrent use. It runs nothing
// and knows no pacer: the load generator and the bench both build on it.
package load
