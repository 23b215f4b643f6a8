package baseline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/raftpace/raftpace/client"
)

// DefaultPostgresURL is the server the bench uses when neither --postgres
// nor RAFTPACE_BENCH_POSTGRES names one: the local one, trust auth.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PostgresURL returns RAFTPACE_BENCH_POSTGRES if set, else DefaultPostgresURL.
func PostgresURL() string {
	if u := os.Getenv("RAFTPACE_BENCH_POSTGRES"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// PostgresTable holds the pacer's cursors: per key, next_at is the key's
// theoretical arrival time (GCRA's TAT) on the server's clock.
const PostgresTable = "raftpace_bench_pacer"

const pgCreate = `CREATE TABLE IF NOT EXISTS ` + PostgresTable + ` (
	key     text PRIMARY KEY,
	next_at timestamptz NOT NULL
)`

// pgReserve is the Postgres pacer: one statement per reservation, GCRA on
// the server's clock. $1 key, $2 emission interval T, $3 burst tolerance
// tau, $4 the caller's maximum wait, all in microseconds.
//
// The slot starts at max(now, TAT - tau) and TAT moves to max(now, TAT) + T.
// clock_timestamp() is read once (the MATERIALIZED CTE) so the returned
// wait, slot start minus now, is exact and never negative. A request whose
// wait would pass the maximum updates nothing and returns no row (shed, as
// raftpace's Reserve consumes nothing then). A new key starts at now.
const pgReserve = `WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
INSERT INTO ` + PostgresTable + ` AS p (key, next_at)
SELECT $1::text, c.now + $2::float8 * interval '1 microsecond' FROM c
ON CONFLICT (key) DO UPDATE
	SET next_at = GREATEST(p.next_at, (SELECT now FROM c)) + $2::float8 * interval '1 microsecond'
	WHERE p.next_at - $3::float8 * interval '1 microsecond' - (SELECT now FROM c) <= $4::float8 * interval '1 microsecond'
RETURNING GREATEST(0, extract(epoch FROM p.next_at - ($2::float8 + $3::float8) * interval '1 microsecond' - (SELECT now FROM c)))::float8`

// Postgres is the pacer raftpace replaces: every reservation is one
// upsert-and-return statement on one connection per process, which the
// process's callers share behind a mutex.
type Postgres struct {
	lim   client.Limit
	grace time.Duration

	mu   sync.Mutex
	conn *pgx.Conn
}

// ConnectPostgres connects to url (within ctx), makes sure the table exists
// and returns a pacer that gives every key the limit lim.
func ConnectPostgres(ctx context.Context, url string, lim client.Limit, grace time.Duration) (*Postgres, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: %w", err)
	}
	if err := EnsurePostgresTable(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &Postgres{lim: lim, grace: grace, conn: conn}, nil
}

// EnsurePostgresTable creates the pacer's table if it is missing. Several
// processes may race to create it; losing the race is not an error.
func EnsurePostgresTable(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, pgCreate)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") {
		err = nil // unique_violation on pg_type, duplicate_table: created concurrently
	}
	if err != nil {
		return fmt.Errorf("bench: postgres: creating %s: %w", PostgresTable, err)
	}
	return nil
}

// ReserveN reserves one event of key (n must be 1) with one statement, or
// refuses (and consumes nothing) when the wait would pass maxWait.
func (p *Postgres) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	if err := one(key, n); err != nil {
		return client.Reservation{}, err
	}
	t, tau := interval(p.lim)
	p.mu.Lock()
	sent := time.Now()
	var wait float64
	err := p.conn.QueryRow(ctx, pgReserve, key, micros(t), micros(tau), micros(maxWait)).Scan(&wait)
	arrived := time.Now()
	p.mu.Unlock()
	if errors.Is(err, pgx.ErrNoRows) {
		return client.Reservation{}, refused(key, maxWait+1, maxWait)
	}
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: postgres: reserve %q: %w", key, err)
	}
	return remoteGrant(sent, arrived, time.Duration(wait*float64(time.Second)), p.grace), nil
}

// Forfeit does nothing: the slot is not given back.
func (p *Postgres) Forfeit(client.Reservation) {}

// Close closes the connection.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn.Close(context.Background())
}

// RedactURL drops a password from a URL for messages.
func RedactURL(u string) string {
	if cfg, err := pgx.ParseConfig(u); err == nil && cfg.Password != "" {
		return strings.Replace(u, cfg.Password, "xxxxx", 1)
	}
	return u
}
