package pgstore

import "strings"

// tableNames are the tables Open creates; migrate skips the DDL when all exist.
// A schema made by an earlier version lacks the later tables (caps, pauses,
// witness, dry_runs, quotas, quota_counts):
// the DDL then creates just those.
var tableNames = []string{"limits", "members", "horizons", "addresses", "pool_members", "pool_cursors", "caps", "pauses", "witness", "dry_runs", "quotas", "quota_counts"}

// ddlSchema creates the schema. migrate runs it only when the schema is
// missing: even with IF NOT EXISTS, CREATE SCHEMA needs the CREATE right on
// the database, which the owner of a schema made for it beforehand may lack.
const ddlSchema = `CREATE SCHEMA IF NOT EXISTS {S}`

// ddl creates the tables. Every statement is CREATE TABLE IF NOT EXISTS and
// tables are only ever added, never altered, so it also upgrades a schema
// made by an earlier version. The CHECK constraints repeat the validation
// this package does in Go, as a second line of defence for rows written by
// anything else.
const ddl = `
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
CREATE TABLE IF NOT EXISTS {S}.caps (
	cluster    text        NOT NULL,
	key        text        NOT NULL,
	max        integer     NOT NULL CHECK (max >= 1),
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.pauses (
	cluster      text        NOT NULL,
	key          text        NOT NULL,
	paused_until timestamptz NOT NULL,
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.dry_runs (
	cluster    text             NOT NULL,
	key        text             NOT NULL,
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.quotas (
	cluster    text        NOT NULL,
	key        text        NOT NULL,
	quota      bigint      NOT NULL CHECK (quota >= 1),
	per        smallint    NOT NULL CHECK (per BETWEEN 1 AND 4),
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.quota_counts (
	cluster      text      NOT NULL,
	key          text      NOT NULL,
	per          smallint  NOT NULL CHECK (per BETWEEN 1 AND 4),
	window_start bigint    NOT NULL,
	count        bigint    NOT NULL CHECK (count >= 0),
	PRIMARY KEY (cluster, key)
);
CREATE TABLE IF NOT EXISTS {S}.witness (
	cluster    text        NOT NULL,
	node_id    text        NOT NULL,
	seen_at    timestamptz NOT NULL,
	fenced     boolean     NOT NULL,
	PRIMARY KEY (cluster, node_id)
);
`

// Microseconds are Postgres's time resolution: durations travel as bigint
// microseconds and become intervals by multiplying "interval '1 microsecond'"
// (exact below 2^53 µs, about 285 years).
const us = `interval '1 microsecond'`

// maxTolerance caps the pool's tolerance at 100 years in µs, so that
// tat - tol stays within timestamptz's range (4713 BC) for any valid limit.
const maxTolerance = "3155760000000000"

// maxToleranceUS is maxTolerance for the arithmetic done in Go.
const maxToleranceUS = 3155760000000000

// reservePooledSQL is the pool's one statement. Parameters:
// $1 cluster, $2 key, $3 rate (float8), $4 burst (int8), $5 count (int8),
// $6 maxWait (int8 µs), $7 the caller's node ID.
//
//	m    the cluster's unexpired registrations, locked FOR KEY SHARE so that
//	     the DELETE of LeavePool and Fence waits for every reservation that
//	     counted them
//	f    F, and own: whether the caller's registration is among them. A
//	     registration a committed Fence or LeavePool deleted is not: the
//	     lock skips a row deleted while it waited, and a later statement's
//	     snapshot no longer has it
//	q    the interval iv (µs, rounded up), k = floor(B*F), the tolerance
//	     tol = (k-1)*iv (0 when k = 0; capped at 100 years, which only
//	     matters for absurd limits and only ever admits less), and whether
//	     the request is valid (own is part of it, so a caller without a
//	     live registration of its own changes nothing)
//	up   the GCRA step as an upsert. Inserting a fresh cursor admits at
//	     once. On conflict Postgres locks the row and evaluates SET and WHERE
//	     on its latest committed version (so concurrent reservations of one
//	     key serialise), with clock_timestamp() read after the lock: the
//	     WHERE refuses (and nothing changes) when the start lies more than
//	     maxWait ahead; RETURNING gives the new TAT and the time of the update.
//
// The start of an admitted reservation, max(now, oldTAT + (count-1)*iv - tol)
// in GCRA's terms, is recovered from the new TAT alone: with now the clock
// read in SET and t the later one in RETURNING,
//
//	start = max(min(t, newTAT - count*iv), newTAT - iv - tol)
//
// is exactly GCRA's start when the cursor was idle (oldTAT <= now, so
// newTAT - count*iv = now) and otherwise GCRA's start or a moment later, up
// to t: never earlier. The wait is start - t, at least 0.
// For a refusal the wait is estimated from the cursor as the statement's
// snapshot saw it.
const reservePooledSQL = `
WITH n AS (SELECT clock_timestamp() AS t),
m AS (
	SELECT pm.node_id, pm.fraction FROM {S}.pool_members pm, n
	WHERE pm.cluster = $1 AND pm.expires_at > n.t
	FOR KEY SHARE OF pm
),
f AS (
	SELECT LEAST(COALESCE(sum(m.fraction), 0), 1)::float8 AS f,
		COALESCE(bool_or(m.node_id = $7::text), false) AS own
	FROM m
),
p AS (
	SELECT f.f, f.own,
		CASE WHEN f.f > 0 AND $3::float8 * f.f >= 1e-6 THEN ceil(1e6 / ($3::float8 * f.f))::int8 END AS iv,
		floor($4::int8 * f.f)::int8 AS k
	FROM f
),
q AS (
	SELECT p.*, LEAST(GREATEST(p.k - 1, 0) * p.iv, {maxtol}) AS tol,
		(p.own AND p.iv IS NOT NULL AND $5::int8 <= GREATEST(p.k, 1)) AS valid
	FROM p
),
up AS (
	INSERT INTO {S}.pool_cursors AS c (cluster, key, tat)
	SELECT $1, $2, clock_timestamp() + ($5::int8 * q.iv) * {us} FROM q WHERE q.valid
	ON CONFLICT (cluster, key) DO UPDATE
	SET tat = GREATEST(clock_timestamp(), c.tat) + (SELECT $5::int8 * q.iv FROM q) * {us}
	WHERE (SELECT q.valid FROM q)
		AND c.tat + (SELECT ($5::int8 - 1) * q.iv - q.tol FROM q) * {us} <= clock_timestamp() + $6::int8 * {us}
	RETURNING c.tat, clock_timestamp() AS t
),
r AS (
	SELECT q.*, up.tat AS new_tat,
		GREATEST(LEAST(up.t, up.tat - ($5::int8 * q.iv) * {us}), up.tat - (q.iv + q.tol) * {us}) AS start,
		up.t AS at
	FROM q LEFT JOIN up ON true
)
SELECT r.own, r.f, r.k, r.iv IS NOT NULL, r.valid, r.new_tat IS NOT NULL,
	COALESCE((EXTRACT(EPOCH FROM (r.start - r.at)) * 1000000)::int8, 0),
	COALESCE((EXTRACT(EPOCH FROM r.start) * 1000000)::int8, 0),
	COALESCE((SELECT (EXTRACT(EPOCH FROM (GREATEST(n.t, c.tat + (($5::int8 - 1) * r.iv - r.tol) * {us}) - n.t)) * 1000000)::int8
		FROM {S}.pool_cursors c WHERE c.cluster = $1 AND c.key = $2), 0)
FROM r, n
`

// poolFractionSQL is F and own of reservePooledSQL on their own, for
// ReservePooledAll: $1 cluster, $2 the caller's node ID.
const poolFractionSQL = `
WITH m AS (
	SELECT pm.node_id, pm.fraction FROM {S}.pool_members pm
	WHERE pm.cluster = $1 AND pm.expires_at > clock_timestamp()
	FOR KEY SHARE OF pm
)
SELECT LEAST(COALESCE(sum(m.fraction), 0), 1)::float8,
	COALESCE(bool_or(m.node_id = $2::text), false)
FROM m
`

// newQueries substitutes the schema into every statement.
func newQueries(schema string) queries {
	r := strings.NewReplacer("{S}", `"`+schema+`"`, "{us}", us, "{maxtol}", maxTolerance)
	return queries{
		ddlSchema:     r.Replace(ddlSchema),
		ddl:           r.Replace(ddl),
		reservePooled: r.Replace(reservePooledSQL),

		deleteLimits:   r.Replace(`DELETE FROM {S}.limits WHERE cluster = $1`),
		insertLimits:   r.Replace(`INSERT INTO {S}.limits (cluster, key, rate, burst) SELECT $1, k, r, b FROM unnest($2::text[], $3::float8[], $4::int4[]) AS u(k, r, b)`),
		deleteMembers:  r.Replace(`DELETE FROM {S}.members WHERE cluster = $1`),
		insertMembers:  r.Replace(`INSERT INTO {S}.members (cluster, node_id, addr, fraction) SELECT $1, i, a, f FROM unnest($2::text[], $3::text[], $4::float8[]) AS u(i, a, f)`),
		pruneHorizons:  r.Replace(`DELETE FROM {S}.horizons WHERE cluster = $1 AND horizon_at < clock_timestamp() AND NOT (key = ANY($2::text[]))`),
		upsertHorizons: r.Replace(`INSERT INTO {S}.horizons AS h (cluster, key, horizon_at) SELECT $1, k, clock_timestamp() + a * {us} FROM unnest($2::text[], $3::int8[]) AS u(k, a) ON CONFLICT (cluster, key) DO UPDATE SET horizon_at = GREATEST(h.horizon_at, EXCLUDED.horizon_at)`),
		loadLimits:     r.Replace(`SELECT key, rate, burst FROM {S}.limits WHERE cluster = $1`),
		deleteDryRuns:  r.Replace(`DELETE FROM {S}.dry_runs WHERE cluster = $1`),
		insertDryRuns:  r.Replace(`INSERT INTO {S}.dry_runs (cluster, key) SELECT $1, k FROM unnest($2::text[]) AS u(k)`),
		loadDryRuns:    r.Replace(`SELECT key FROM {S}.dry_runs WHERE cluster = $1`),
		deleteQuotas:   r.Replace(`DELETE FROM {S}.quotas WHERE cluster = $1`),
		insertQuotas:   r.Replace(`INSERT INTO {S}.quotas (cluster, key, quota, per) SELECT $1, k, q, p FROM unnest($2::text[], $3::int8[], $4::int2[]) AS u(k, q, p)`),
		loadQuotas:     r.Replace(`SELECT key, quota, per FROM {S}.quotas WHERE cluster = $1`),
		// A count only grows within its window; a later window or another
		// period replaces it (fsm.CommitQuotas's rule). Counts of windows
		// that began over 32 days ago (a month is the longest) carry
		// nothing and go.
		pruneQuotaCounts: r.Replace(`DELETE FROM {S}.quota_counts WHERE cluster = $1 AND window_start < EXTRACT(EPOCH FROM clock_timestamp())::int8 - 32*86400`),
		upsertQuotaCounts: r.Replace(`INSERT INTO {S}.quota_counts AS q (cluster, key, per, window_start, count) SELECT $1, k, p, w, c FROM unnest($2::text[], $3::int2[], $4::int8[], $5::int8[]) AS u(k, p, w, c)
			ON CONFLICT (cluster, key) DO UPDATE SET per = EXCLUDED.per, window_start = EXCLUDED.window_start,
			count = CASE WHEN q.per = EXCLUDED.per AND q.window_start = EXCLUDED.window_start THEN GREATEST(q.count, EXCLUDED.count) ELSE EXCLUDED.count END
			WHERE q.per <> EXCLUDED.per OR q.window_start <= EXCLUDED.window_start`),
		loadQuotaCounts: r.Replace(`SELECT key, per, window_start, count FROM {S}.quota_counts WHERE cluster = $1`),
		loadMembers:     r.Replace(`SELECT node_id, addr, fraction FROM {S}.members WHERE cluster = $1`),
		loadHorizons:    r.Replace(`SELECT key, (EXTRACT(EPOCH FROM GREATEST(horizon_at - clock_timestamp(), interval '0')) * 1000000)::int8 FROM {S}.horizons WHERE cluster = $1`),
		deleteCaps:      r.Replace(`DELETE FROM {S}.caps WHERE cluster = $1`),
		insertCaps:      r.Replace(`INSERT INTO {S}.caps (cluster, key, max) SELECT $1, k, m FROM unnest($2::text[], $3::int4[]) AS u(k, m)`),
		// Every passed pause goes, whether or not cp names it: a key cp
		// names is inserted again by upsertPauses, in the future.
		prunePauses:  r.Replace(`DELETE FROM {S}.pauses WHERE cluster = $1 AND paused_until <= clock_timestamp()`),
		upsertPauses: r.Replace(`INSERT INTO {S}.pauses AS p (cluster, key, paused_until) SELECT $1, k, clock_timestamp() + a * {us} FROM unnest($2::text[], $3::int8[]) AS u(k, a) ON CONFLICT (cluster, key) DO UPDATE SET paused_until = GREATEST(p.paused_until, EXCLUDED.paused_until)`),
		loadCaps:     r.Replace(`SELECT key, max FROM {S}.caps WHERE cluster = $1`),
		// One clock reading for the filter and the difference, so every
		// pause returned has at least 1µs left (both are whole µs).
		loadPauses: r.Replace(`WITH n AS (SELECT clock_timestamp() AS t) SELECT p.key, (EXTRACT(EPOCH FROM p.paused_until - n.t) * 1000000)::int8 FROM {S}.pauses p, n WHERE p.cluster = $1 AND p.paused_until > n.t`),

		publish:  r.Replace(`INSERT INTO {S}.addresses AS a (cluster, node_id, raft_addr, gossip_addr, updated_at) VALUES ($1, $2, $3, $4, clock_timestamp()) ON CONFLICT (cluster, node_id) DO UPDATE SET raft_addr = EXCLUDED.raft_addr, gossip_addr = EXCLUDED.gossip_addr, updated_at = EXCLUDED.updated_at`),
		discover: r.Replace(`SELECT gossip_addr FROM {S}.addresses WHERE cluster = $1 AND updated_at >= clock_timestamp() - $2::int8 * {us} ORDER BY updated_at DESC, node_id`),
		forget:   r.Replace(`DELETE FROM {S}.addresses WHERE cluster = $1 AND node_id = $2`),

		witness: r.Replace(`INSERT INTO {S}.witness AS w (cluster, node_id, seen_at, fenced) VALUES ($1, $2, clock_timestamp(), false) ON CONFLICT (cluster, node_id) DO UPDATE SET seen_at = GREATEST(w.seen_at, clock_timestamp()) RETURNING w.fenced`),
		unfence: r.Replace(`UPDATE {S}.witness SET fenced = false WHERE cluster = $1 AND node_id = $2`),
		// Fence's statements, in this order in one transaction (see Fence):
		// lock the member's witness row (creating it for a member never
		// seen; the no-op update takes the lock on the latest version),
		// read it and the registration with a snapshot taken after the
		// lock, mark it fenced and delete the registration, and read the
		// wait with a snapshot taken after the DELETE.
		fenceLock: r.Replace(`INSERT INTO {S}.witness AS w (cluster, node_id, seen_at, fenced) VALUES ($1, $2, '-infinity', false) ON CONFLICT (cluster, node_id) DO UPDATE SET fenced = w.fenced`),
		fenceRead: r.Replace(`WITH n AS (SELECT clock_timestamp() AS t)
SELECT w.fenced, w.seen_at > n.t - $3::int8 * {us},
	CASE WHEN isfinite(w.seen_at) THEN (EXTRACT(EPOCH FROM GREATEST(n.t - w.seen_at, interval '0')) * 1000000)::int8 ELSE -1 END,
	EXISTS (SELECT 1 FROM {S}.pool_members pm WHERE pm.cluster = $1 AND pm.node_id = $2 AND pm.expires_at > n.t)
FROM {S}.witness w, n WHERE w.cluster = $1 AND w.node_id = $2`),
		fenceApply: r.Replace(`WITH d AS (DELETE FROM {S}.pool_members WHERE cluster = $1 AND node_id = $2)
UPDATE {S}.witness SET fenced = true WHERE cluster = $1 AND node_id = $2`),
		fenceWait: r.Replace(`WITH n AS (SELECT clock_timestamp() AS t)
SELECT CASE WHEN isfinite(w.seen_at) THEN (EXTRACT(EPOCH FROM GREATEST(w.seen_at + $3::int8 * {us} - n.t, interval '0')) * 1000000)::int8 ELSE 0 END,
	COALESCE((SELECT (EXTRACT(EPOCH FROM GREATEST(max(c.tat) - n.t, interval '0')) * 1000000)::int8 FROM {S}.pool_cursors c WHERE c.cluster = $1), 0)
FROM {S}.witness w, n WHERE w.cluster = $1 AND w.node_id = $2`),

		joinPool:     r.Replace(`INSERT INTO {S}.pool_members AS p (cluster, node_id, fraction, expires_at) VALUES ($1, $2, $3, clock_timestamp() + $4::int8 * {us}) ON CONFLICT (cluster, node_id) DO UPDATE SET fraction = EXCLUDED.fraction, expires_at = EXCLUDED.expires_at`),
		leavePool:    r.Replace(`DELETE FROM {S}.pool_members WHERE cluster = $1 AND node_id = $2`),
		poolFraction: r.Replace(poolFractionSQL),
		// A missing cursor is made idle (at the epoch): GCRA's max(now,
		// tat) then starts it at once, as ReservePooled's insert does.
		poolCursorsMake: r.Replace(`INSERT INTO {S}.pool_cursors (cluster, key, tat)
			SELECT $1, k, 'epoch'::timestamptz FROM unnest($2::text[]) AS k
			ON CONFLICT (cluster, key) DO NOTHING`),
		// Locked in key order, so that two reservations of several keys
		// cannot deadlock; the clock is read after the locks, as in
		// ReservePooled's update.
		poolCursorsLock: r.Replace(`SELECT c.key, (EXTRACT(EPOCH FROM c.tat) * 1000000)::int8,
			(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::int8
			FROM {S}.pool_cursors c WHERE c.cluster = $1 AND c.key = ANY($2::text[])
			ORDER BY c.key FOR UPDATE`),
		poolCursorsSet: r.Replace(`UPDATE {S}.pool_cursors c SET tat = 'epoch'::timestamptz + u.tat * {us}
			FROM unnest($2::text[], $3::int8[]) AS u(key, tat)
			WHERE c.cluster = $1 AND c.key = u.key`),
		poolBusy: r.Replace(`SELECT COALESCE((EXTRACT(EPOCH FROM GREATEST(max(tat) - clock_timestamp(), interval '0')) * 1000000)::int8, 0) FROM {S}.pool_cursors WHERE cluster = $1`),
	}
}

type queries struct {
	ddlSchema, ddl, reservePooled                            string
	deleteLimits, insertLimits, deleteMembers, insertMembers string
	deleteDryRuns, insertDryRuns, loadDryRuns                string
	deleteQuotas, insertQuotas, loadQuotas                   string
	pruneQuotaCounts, upsertQuotaCounts, loadQuotaCounts     string
	pruneHorizons, upsertHorizons                            string
	loadLimits, loadMembers, loadHorizons                    string
	deleteCaps, insertCaps, prunePauses, upsertPauses        string
	loadCaps, loadPauses                                     string
	publish, discover, forget, joinPool, leavePool, poolBusy string
	poolFraction, poolCursorsMake, poolCursorsLock           string
	poolCursorsSet                                           string
	witness, unfence                                         string
	fenceLock, fenceRead, fenceApply, fenceWait              string
}
