// Package report is what one bench run measured, and how it reads. A
// Report holds the figures: reservation latency per approach and number
// of callers, the leader's grant throughput through leases, each ceiling
// run with its worst windows against the bound R*W + B + R*delta, the
// many-slow-keys runs, what was skipped or failed, and the targets these
// are judged against (Finish). It renders as Markdown (Markdown), JSON
// (JSON, through encoding/json) and an SVG chart of the admitted rate
// over time (SVG); WriteFiles writes all three.
//
// It promises that rendering reads the Report and nothing else (no clock,
// no process, no file), that rows come in one fixed table order whatever
// order they were added in, and that every figure is printed with its
// ratio to raftpace's reference row. It measures nothing itself: the
// bench's runner fills a Report in; the JSON field tags are the format of
// report.json.
package report
