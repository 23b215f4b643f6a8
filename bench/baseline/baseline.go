package baseline

import (
	"fmt"
	"time"

	"github.com/raftpace/raftpace/client"
)

// DefaultGrace is how late after its time a slot may be used, for every
// approach: raftpace's default UseGrace. The ceiling check allows the same
// R*Grace for all of them (the delta of R*W + B + R*delta).
const DefaultGrace = 50 * time.Millisecond

// remoteGrant places a wait answered by another process (a database, a
// pacer server) on this host's clock the way a raftpace node places a
// forwarded grant: the slot may go when the answer has arrived plus the
// wait, and must go by when the request was sent plus the wait plus grace.
// A round trip longer than grace makes UseBy earlier than At: the caller
// forfeits it and asks again.
func remoteGrant(sent, arrived time.Time, wait, grace time.Duration) client.Reservation {
	return client.Reservation{At: arrived.Add(wait), UseBy: sent.Add(wait + grace)}
}

// refused is the error a pacer returns when the wait would pass maxWait:
// it wraps client.ErrLimitExceeded, as raftpace's does.
func refused(key string, wait, maxWait time.Duration) error {
	return &client.LimitExceededError{Key: key, Wait: wait, MaxWait: maxWait}
}

// interval returns the emission interval T (rounded up to a whole ns, as
// raftpace's pacer does) and the burst tolerance tau = (B-1)*T of lim.
func interval(lim client.Limit) (t, tau time.Duration) {
	t = lim.Interval()
	return t, time.Duration(lim.Burst-1) * t
}

// micros converts d to microseconds, fractions kept.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// one fails unless n is 1: the remote pacers reserve single events.
func one(key string, n int) error {
	if n != 1 {
		return fmt.Errorf("bench: reserve %q: %w: count %d: the bench's pacers reserve one event at a time", key, client.ErrInvalidRequest, n)
	}
	return nil
}

// Statements are the baseline pacers' server-side texts, for a bench in
// another language (clients/python/bench.py asks `raftpace bench
// --print-baselines` for them, so both run the same statements).
type Statements struct {
	// PostgresCreate creates PostgresTable; PostgresReserve is the Postgres
	// pacer's one statement per reservation: $1 key, $2 emission interval T,
	// $3 burst tolerance tau, $4 maximum wait, all in microseconds; it
	// returns the wait in seconds, or no row when shed.
	PostgresTable   string `json:"postgres_table"`
	PostgresCreate  string `json:"postgres_create"`
	PostgresReserve string `json:"postgres_reserve"`
	// RedisGCRA is the Redis pacer's Lua script: KEYS[1] the key's TAT,
	// ARGV T, tau, maximum wait in microseconds; it returns {granted, wait}.
	RedisGCRA string `json:"redis_gcra"`
}

// ServerStatements returns the texts the Postgres and Redis pacers run.
func ServerStatements() Statements {
	return Statements{PostgresTable: PostgresTable, PostgresCreate: pgCreate, PostgresReserve: pgReserve, RedisGCRA: redisGCRA}
}
