package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/logging"
)

// Defaults of Config.
const (
	DefaultSchema           = "raftpace"
	DefaultCluster          = "raftpace" // node.Config.ClusterName's default
	DefaultStatementTimeout = 2 * time.Second
	maxConns                = 4
)

// Config configures Open. The zero value of every field but URL has a
// default.
type Config struct {
	// URL is a libpq connection string or URL (postgres://user@host:port/db?sslmode=disable).
	// Required. It is never logged.
	URL string
	// Schema holds the tables: a plain lowercase identifier ([a-z_][a-z0-9_]*,
	// at most 63 bytes). Default "raftpace". Open creates it and its tables
	// when they are missing.
	Schema string
	// Cluster scopes every row, so several clusters can share a schema. It
	// follows fsm.ValidateID. Default "raftpace", like node.Config.ClusterName.
	Cluster string
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// StatementTimeout bounds each call: its context gets at most this
	// long, and Postgres's statement_timeout is set to it. Default 2s.
	StatementTimeout time.Duration
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// withDefaults fills the zero fields and reports every problem at once.
func (c Config) withDefaults() (Config, error) {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.Logger == nil {
		c.Logger = logging.Discard()
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	var errs []error
	if c.URL == "" {
		errs = append(errs, invalid("config", "URL: must not be empty"))
	}
	if !identRE.MatchString(c.Schema) {
		errs = append(errs, invalid("config", "Schema %q: must be a plain lowercase identifier ([a-z_][a-z0-9_]*, at most 63 bytes)", c.Schema))
	}
	if err := fsm.ValidateID(c.Cluster); err != nil {
		errs = append(errs, invalidErr("config: Cluster", err))
	}
	if c.StatementTimeout < time.Millisecond {
		errs = append(errs, invalid("config", "StatementTimeout %v: must be at least 1ms", c.StatementTimeout))
	}
	return c, errors.Join(errs...)
}

// Store is raftpace's Postgres layer for one cluster: checkpoint,
// discovery, the pooled fallback cursor and the witness. It holds a small connection
// pool (at most 4 connections). Every method is safe for concurrent use;
// every method that talks to Postgres returns within Config.StatementTimeout
// (or the caller's context, if sooner).
type Store struct {
	cfg    Config
	pool   *pgxpool.Pool
	closed atomic.Bool

	// Statement texts with the schema substituted.
	q queries
}

// Open validates cfg, connects, and creates the schema and the tables if
// they are missing. Several processes may Open the same schema at once:
// the DDL runs in one transaction under a transaction-level advisory lock,
// and is skipped when every table already exists (so a role without CREATE
// rights can use a schema made for it beforehand). A schema made by an
// earlier version gets the tables added since (CREATE TABLE IF NOT EXISTS
// only; CREATE SCHEMA is skipped when the schema exists), which needs the
// CREATE right on the schema only, not on the database.
//
// Open fails with ErrInvalid for a bad Config and ErrUnavailable when
// Postgres cannot be reached within StatementTimeout.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, invalidErr("config: URL", err)
	}
	pc.MaxConns = maxConns
	pc.MinConns = 0
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.HealthCheckPeriod = 30 * time.Second
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > cfg.StatementTimeout {
		pc.ConnConfig.ConnectTimeout = cfg.StatementTimeout
	}
	rp := pc.ConnConfig.RuntimeParams
	rp["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds()+1, 10)
	rp["lock_timeout"] = rp["statement_timeout"]
	rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(2*cfg.StatementTimeout.Milliseconds()+1, 10)
	if rp["application_name"] == "" {
		rp["application_name"] = "raftpace-pgstore"
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.StatementTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc) // connects lazily
	if err != nil {
		return nil, translate("open", err, cfg.StatementTimeout)
	}
	s := &Store{cfg: cfg, pool: pool, q: newQueries(cfg.Schema)}
	if err := s.migrate(parent, ctx); err != nil {
		pool.Close()
		return nil, err
	}
	cfg.Logger.Debug("pgstore: ready", "schema", cfg.Schema, "cluster", cfg.Cluster)
	return s, nil
}

// Close closes the connections. It waits for calls in progress (each ends
// within StatementTimeout) and is idempotent; later calls fail with
// ErrClosed.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.pool.Close()
}

// Cluster returns the cluster name that scopes this Store's rows.
func (s *Store) Cluster() string { return s.cfg.Cluster }

// begin checks the Store is open and derives the call's context.
func (s *Store) begin(ctx context.Context, op string) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, fmt.Errorf("pgstore: %s: %w", op, ErrClosed)
	}
	c, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	return c, cancel, nil
}

// fail translates err, which a call with parent context parent got.
// When the caller's own context ended, the error says so and does not
// claim Postgres is down.
func (s *Store) fail(parent context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w: %w", op, ErrClosed, err)
	}
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("pgstore: %s: %w (%w)", op, perr, err)
	}
	return translate(op, err, s.cfg.StatementTimeout)
}

// migrate creates the schema and tables when any is missing: on a new
// database all of them, on a schema made by an earlier version the tables
// added since. parent is Open's context, ctx the one bounded by
// StatementTimeout.
func (s *Store) migrate(parent, ctx context.Context) error {
	var schemaExists bool
	var have []string
	err := s.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
			ARRAY(SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = ANY($2))`,
		s.cfg.Schema, tableNames).Scan(&schemaExists, &have)
	if err != nil {
		return s.fail(parent, "open: look up tables", err)
	}
	var missing []string
	for _, t := range tableNames {
		if !slices.Contains(have, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Serialise concurrent DDL on this schema: CREATE ... IF NOT EXISTS
		// alone can fail with a unique violation when two sessions race.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('raftpace.pgstore.ddl'), hashtext($1))`, s.cfg.Schema); err != nil {
			return err
		}
		if !schemaExists {
			if _, err := tx.Exec(ctx, s.q.ddlSchema); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, s.q.ddl)
		return err
	})
	if err != nil {
		return s.fail(parent, fmt.Sprintf("open: create tables %s in schema %q", strings.Join(missing, ", "), s.cfg.Schema), err)
	}
	if schemaExists {
		s.cfg.Logger.Info("pgstore: created missing tables", "schema", s.cfg.Schema, "tables", missing)
	} else {
		s.cfg.Logger.Info("pgstore: created schema and tables", "schema", s.cfg.Schema)
	}
	return nil
}

// ceilMicros rounds d up to whole microseconds, Postgres's resolution.
func ceilMicros(d time.Duration) int64 {
	us := d / time.Microsecond
	if d%time.Microsecond > 0 {
		us++
	}
	return int64(us)
}
