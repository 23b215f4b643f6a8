package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testTimeout is the StatementTimeout of the test Stores: generous, for a
// shared, noisy CI machine.
const testTimeout = 5 * time.Second

// testURL returns the Postgres URL of the tests (RAFTPACE_TEST_POSTGRES).
// Without it the test skips, or fails when CI is set.
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("RAFTPACE_TEST_POSTGRES")
	if u == "" {
		const how = "RAFTPACE_TEST_POSTGRES is not set: run scripts/test.sh (it finds or starts a PostgreSQL), " +
			"or set it to a server's URL, e.g. RAFTPACE_TEST_POSTGRES='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'"
		if os.Getenv("CI") != "" {
			tb.Fatal("pgstore tests need a real PostgreSQL under CI: " + how)
		}
		tb.Skip(how)
	}
	return u
}

// newSchema returns a fresh schema name ("rp_test_<random>") that is dropped
// when the test ends (after the Stores opened later are closed).
func newSchema(tb testing.TB) string {
	tb.Helper()
	url := testURL(tb)
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	schema := "rp_test_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openStore opens a Store on schema for cluster, closed when the test ends.
func openStore(tb testing.TB, schema, cluster string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), Config{
		URL: testURL(tb), Schema: schema, Cluster: cluster, StatementTimeout: testTimeout,
	})
	if err != nil {
		tb.Fatalf("Open(schema %s, cluster %s): %v", schema, cluster, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// newStore is openStore on a fresh schema.
func newStore(tb testing.TB, cluster string) *Store {
	tb.Helper()
	return openStore(tb, newSchema(tb), cluster)
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// wantErr fails unless err wraps target.
func wantErr(tb testing.TB, err, target error) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Fatalf("error %v: want one wrapping %v", err, target)
	}
}

// pgNowUS is Postgres's clock, in microseconds since the Unix epoch.
func pgNowUS(tb testing.TB, s *Store) int64 {
	tb.Helper()
	var us int64
	must(tb, s.pool.QueryRow(ctxT(tb), `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::int8`).Scan(&us))
	return us
}
