package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/raftpace/raftpace/fsm"
)

// previousDDL is the schema as the version before caps and pauses created
// it, verbatim but for the CREATE SCHEMA, which the tests run separately.
const previousDDL = `
CREATE TABLE IF NOT EXISTS {S}.limits (
	cluster    text             NOT NULL,
	key        text             NOT NULL,
	rate       double precision NOT NULL CHECK (rate > 0 AND rate < 'Infinity'),
	burst      integer          NOT NULL CHECK (burst >= 1),
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.members (
	cluster    text             NOT NULL,
	node_id    text             NOT NULL,
	addr       text             NOT NULL,
	fraction   double precision NOT NULL CHECK (fraction >= 0 AND fraction <= 1),
	PRIMARY KEY (cluster, node_id)
);
CREATE TABLE IF NOT EXISTS {S}.horizons (
	cluster    text        NOT NULL,
	key        text        NOT NULL,
	horizon_at timestamptz NOT NULL,
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.addresses (
	cluster     text        NOT NULL,
	node_id     text        NOT NULL,
	raft_addr   text        NOT NULL,
	gossip_addr text        NOT NULL,
	updated_at  timestamptz NOT NULL,
	PRIMARY KEY (cluster, node_id)
);
CREATE TABLE IF NOT EXISTS {S}.pool_members (
	cluster    text             NOT NULL,
	node_id    text             NOT NULL,
	fraction   double precision NOT NULL CHECK (fraction >= 0 AND fraction <= 1),
	expires_at timestamptz      NOT NULL,
	PRIMARY KEY (cluster, node_id)
);
CREATE TABLE IF NOT EXISTS {S}.pool_cursors (
	cluster    text        NOT NULL,
	key        text        NOT NULL,
	tat        timestamptz NOT NULL,
	PRIMARY KEY (cluster, key)
);
INSERT INTO {S}.limits VALUES ('c1', 'old', 5, 2);
INSERT INTO {S}.horizons VALUES ('c1', 'old', clock_timestamp() + interval '1 minute');
`

// superConn connects as the tests' user, closed when the test ends.
func superConn(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, testURL(t))
	must(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// checkUpgraded checks that s, opened on a schema made by previousDDL, has
// every table, kept the old rows, checkpoints caps and pauses, and
// witnesses and fences members.
func checkUpgraded(t *testing.T, s *Store) {
	t.Helper()
	ctx := ctxT(t)
	var tables []string
	must(t, s.pool.QueryRow(ctx, `SELECT ARRAY(SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = $1 ORDER BY 1)`,
		s.cfg.Schema).Scan(&tables))
	if want := slices.Sorted(slices.Values(tableNames)); !slices.Equal(tables, want) {
		t.Fatalf("tables after upgrading: %v, want %v", tables, want)
	}
	cp, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !found || !reflect.DeepEqual(cp.Limits, map[string]fsm.Limit{"old": {Rate: 5, Burst: 2}}) || cp.Horizons["old"] < 50*time.Second {
		t.Fatalf("the previous version's checkpoint after upgrading: found %v, %+v", found, cp)
	}
	cp.Caps = map[string]int{"old": 3}
	cp.Pauses = map[string]time.Duration{"old": time.Minute}
	must(t, s.SaveCheckpoint(ctx, cp))
	got, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Caps, cp.Caps) || got.Pauses["old"] < 50*time.Second {
		t.Fatalf("caps and pauses after upgrading: %v, %v", got.Caps, got.Pauses)
	}
	if fenced, err := s.Witness(ctx, "n1"); err != nil || fenced {
		t.Fatalf("Witness after upgrading: fenced %v, err %v", fenced, err)
	}
	if r, err := s.Fence(ctx, "n2", time.Second, time.Second); err != nil || !r.Fenced {
		t.Fatalf("Fence after upgrading: %+v, err %v", r, err)
	}
}

// Open on a schema made by the previous version adds the new tables and
// keeps the data.
func TestOpen_UpgradesPreviousSchema(t *testing.T) {
	schema := newSchema(t)
	conn := superConn(t)
	q := `CREATE SCHEMA "` + schema + `";` + strings.ReplaceAll(previousDDL, "{S}", `"`+schema+`"`)
	if _, err := conn.Exec(ctxT(t), q); err != nil {
		t.Fatal(err)
	}
	checkUpgraded(t, openStore(t, schema, "c1"))
	openStore(t, schema, "c1") // and again: nothing left to create
}

// The owner of a schema made for it beforehand, without the CREATE right on
// the database, can still upgrade it: CREATE SCHEMA IF NOT EXISTS would
// need that right even for an existing schema, so Open skips it.
func TestOpen_UpgradeNeedsNoDatabaseCreateRight(t *testing.T) {
	u, err := url.Parse(testURL(t))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Query().Has("options") {
		t.Skip("needs RAFTPACE_TEST_POSTGRES as a postgres:// URL without options")
	}
	conn := superConn(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "rp_test_role_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctxT(t), `CREATE ROLE `+role+` NOLOGIN`); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			t.Skipf("the test user cannot create roles: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the schema's cleanup, registered below
		if _, err := conn.Exec(context.Background(), `DROP ROLE IF EXISTS `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	schema := newSchema(t)
	ctx := ctxT(t)
	must(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA "`+schema+`" AUTHORIZATION `+role+`; SET LOCAL ROLE `+role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, strings.ReplaceAll(previousDDL, "{S}", `"`+schema+`"`))
		return err
	}))
	var canCreate bool
	must(t, conn.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'CREATE')`, role).Scan(&canCreate))
	if canCreate {
		t.Skipf("role %s has CREATE on the database (granted to PUBLIC?): nothing to test", role)
	}

	q := u.Query()
	q.Set("options", "-c role="+role)                       // the session acts as the role, no login needed
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads no + as a space
	s, err := Open(context.Background(), Config{URL: u.String(), Schema: schema, Cluster: "c1", StatementTimeout: testTimeout})
	if err != nil {
		t.Fatalf("Open as the schema's owner without CREATE on the database: %v", err)
	}
	t.Cleanup(s.Close)
	var who string
	must(t, s.pool.QueryRow(ctx, `SELECT current_user`).Scan(&who))
	if who != role {
		t.Fatalf("the store acts as %s, want %s", who, role)
	}
	checkUpgraded(t, s)
}
