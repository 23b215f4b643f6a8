package bench

import (
	"context"
	"time"

	"github.com/raftpace/raftpace/bench/baseline"
	"github.com/raftpace/raftpace/bench/load"
	"github.com/raftpace/raftpace/client"
)

// The load generator's record (package load), under the names raftpace's
// commands use.
type (
	// LoadReport is what a load generator writes at exit: load.Report.
	LoadReport = load.Report
	// KeyLoad is one key's load in one process: load.KeyLoad.
	KeyLoad = load.KeyLoad
	// Histogram counts durations for the latency percentiles: load.Histogram.
	Histogram = load.Histogram
)

// ReadLoadReport reads a report written by a load generator (load.ReadReport).
func ReadLoadReport(path string) (*LoadReport, error) { return load.ReadReport(path) }

// The baselines' settings and constructors (package baseline), under the
// names raftpace's commands use.
const (
	// DefaultGrace is how late after its time a slot may be used, for
	// every approach: raftpace's default UseGrace.
	DefaultGrace = baseline.DefaultGrace
	// DefaultPostgresURL is the Postgres pacer's server when none is named.
	DefaultPostgresURL = baseline.DefaultPostgresURL
	// DefaultRedisAddr is where the bench looks for a Redis server.
	DefaultRedisAddr = baseline.DefaultRedisAddr
)

// PostgresURL returns RAFTPACE_BENCH_POSTGRES if set, else DefaultPostgresURL.
func PostgresURL() string { return baseline.PostgresURL() }

// Statements are the baselines' server-side texts (baseline.Statements).
type Statements = baseline.Statements

// ServerStatements returns the Postgres and Redis pacers' texts
// (baseline.ServerStatements).
func ServerStatements() baseline.Statements { return baseline.ServerStatements() }

// NewXRate returns an x/time/rate pacer (baseline.NewXRate).
func NewXRate(lim client.Limit, grace time.Duration) (*baseline.XRate, error) {
	return baseline.NewXRate(lim, grace)
}

// ConnectPostgres connects the Postgres pacer (baseline.ConnectPostgres).
func ConnectPostgres(ctx context.Context, url string, lim client.Limit, grace time.Duration) (*baseline.Postgres, error) {
	return baseline.ConnectPostgres(ctx, url, lim, grace)
}

// ConnectRedis connects the Redis GCRA pacer (baseline.ConnectRedis).
func ConnectRedis(ctx context.Context, addr string, lim client.Limit, grace time.Duration) (*baseline.Redis, error) {
	return baseline.ConnectRedis(ctx, addr, lim, grace)
}

// NewGubernator returns a pacer calling one gubernator instance
// (baseline.NewGubernator).
func NewGubernator(addr string, lim client.Limit, conns int, grace time.Duration) (*baseline.Gubernator, error) {
	return baseline.NewGubernator(addr, lim, conns, grace)
}

// DialLoopback connects the loopback floor to an echo server
// (baseline.DialLoopback).
func DialLoopback(ctx context.Context, addr string, grace time.Duration) (*baseline.Loopback, error) {
	return baseline.DialLoopback(ctx, addr, grace)
}
