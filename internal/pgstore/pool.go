package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/fsm"
)

// Bounds of the pooled cursor.
const (
	// MinPoolRate is the slowest pool rate R*F (events per second) that
	// ReservePooled paces: one event per about 11.6 days. Below it the
	// interval would overflow the microsecond arithmetic; ReservePooled
	// returns ErrInvalid and the member paces locally instead.
	MinPoolRate = 1e-6
	// MaxPoolTTL is the longest registration JoinPool accepts.
	MaxPoolTTL = time.Hour
)

// JoinPool registers (or renews) nodeID's fallback fraction in the
// cluster's pool until clock_timestamp() + ttl (ttl rounded up to the
// microsecond, at most MaxPoolTTL). Members call it again before ttl runs
// out to stay in the pool.
//
// A member may use ReservePooled only while its registration is live. It
// measures that from before its JoinPool call: registered at local time q
// with ttl, it stops using the pool at q + ttl, which is never after the
// registration's expiry on Postgres's clock.
//
// JoinPool is also a heartbeat (see Witness), in the same transaction: it
// records seen_at first, which locks the member's witness row, and if the
// member is fenced it registers nothing and fails with ErrFenced. Holding
// that lock until the registration commits is what makes it atomic with
// Fence: a JoinPool either commits before a Fence reads the member's state
// (so the Fence sees it alive and refuses) or finds the fence.
func (s *Store) JoinPool(ctx context.Context, nodeID string, fraction float64, ttl time.Duration) error {
	const op = "join pool"
	if err := fsm.ValidateID(nodeID); err != nil {
		return invalidErr(op, err)
	}
	if !(fraction >= 0 && fraction <= 1) {
		return invalid(op, "fraction %v: must be in [0, 1]", fraction)
	}
	if ttl <= 0 || ttl > MaxPoolTTL {
		return invalid(op, "ttl %v: must be > 0 and <= %v (MaxPoolTTL)", ttl, MaxPoolTTL)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	var fenced bool
	err = pgx.BeginFunc(c, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(c, s.q.witness, s.cfg.Cluster, nodeID).Scan(&fenced); err != nil {
			return err
		}
		if fenced {
			return errRollback
		}
		_, err := tx.Exec(c, s.q.joinPool, s.cfg.Cluster, nodeID, fraction, ceilMicros(ttl))
		return err
	})
	switch {
	case fenced:
		return fmt.Errorf("pgstore: %s %q: %w", op, nodeID, ErrFenced)
	case err != nil:
		return s.fail(ctx, op, err)
	}
	return nil
}

// errRollback makes pgx.BeginFunc roll back; it never leaves this package.
var errRollback = errors.New("pgstore: roll back")

// LeavePool deletes nodeID's registration (if any) and returns busy: how
// far ahead of now, on Postgres's clock, the latest TAT of any of the
// cluster's pool cursors lies (>= 0). Slots up to then were paced counting
// this member's fraction, so the caller must not hand its fraction back to
// the leader before busy has passed, measured from when LeavePool returns.
//
// The DELETE waits for every reservation in flight that counted the
// registration (they lock it FOR KEY SHARE), and busy is read after it in
// the same transaction, so no reservation that counted the fraction can
// move a cursor past busy.
//
// A registration that simply expires stops counting at its expiry; a
// member that lets it lapse instead of leaving must wait, before handing
// its fraction back, as long as the pool's cursors may lie ahead: at most
// the longest maxWait its peers use plus one burst share of intervals.
func (s *Store) LeavePool(ctx context.Context, nodeID string) (busy time.Duration, err error) {
	const op = "leave pool"
	if err := fsm.ValidateID(nodeID); err != nil {
		return 0, invalidErr(op, err)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer cancel()
	var busyUS int64
	err = pgx.BeginFunc(c, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(c, s.q.leavePool, s.cfg.Cluster, nodeID); err != nil {
			return err
		}
		return tx.QueryRow(c, s.q.poolBusy, s.cfg.Cluster).Scan(&busyUS)
	})
	if err != nil {
		return 0, s.fail(ctx, op, err)
	}
	return micros(busyUS), nil
}

// ReservePooled reserves count events of key on the cluster's pooled
// cursor and returns how long to wait, from when the answer arrives, before
// using them. It is one statement, the atomic upsert-and-return of a
// Postgres pacer, with every time on Postgres's clock:
//
//	F        = sum of the fractions of unexpired registrations (at most 1); 0 gives ErrNotInPool
//	interval = 1/(R*F), rounded up to the microsecond
//	k        = floor(B*F), the pool's share of the burst
//	tol      = (k-1)*interval if k >= 1, else 0
//	start    = max(now, tat + (count-1)*interval - tol)
//	tat'     = max(now, tat) + count*interval
//
// count must be at least 1 and at most max(1, k) (ErrInvalid otherwise).
// If start - now exceeds maxWait the cursor is left as it was and the error
// is a *LimitExceededError. Any window of length W then holds at most
// R*F*W + max(1, k) of the pool's events, plus R*F times the delay between
// the answer and the use of the slot.
//
// nodeID is the caller's: it must have a live registration of its own
// (see JoinPool), or the call fails with ErrNotInPool and changes nothing,
// however many other members are registered. A fenced member has none
// (Fence deleted it and JoinPool refuses it).
func (s *Store) ReservePooled(ctx context.Context, nodeID, key string, lim fsm.Limit, count int, maxWait time.Duration) (wait time.Duration, err error) {
	wait, _, err = s.reservePooled(ctx, nodeID, key, lim, count, maxWait)
	return wait, err
}

// reservePooled is ReservePooled that also returns the start as
// microseconds since the Unix epoch on Postgres's clock (for tests that
// check the ceiling across Stores).
func (s *Store) reservePooled(ctx context.Context, nodeID, key string, lim fsm.Limit, count int, maxWait time.Duration) (wait time.Duration, startUS int64, err error) {
	op := fmt.Sprintf("reserve pooled %q", key)
	if err := fsm.ValidateID(nodeID); err != nil {
		return 0, 0, invalidErr("reserve pooled", err)
	}
	if err := fsm.ValidateKey(key); err != nil {
		return 0, 0, invalidErr("reserve pooled", err)
	}
	if err := checkPoolWant(op, lim, count); err != nil {
		return 0, 0, err
	}
	if maxWait < 0 {
		return 0, 0, invalid(op, "maxWait %v: must be >= 0", maxWait)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, 0, err
	}
	defer cancel()

	var (
		f                            float64
		k                            int64
		own, rateOK, valid, admitted bool
		waitUS, estUS                int64
	)
	err = s.pool.QueryRow(c, s.q.reservePooled, s.cfg.Cluster, key, lim.Rate, int64(lim.Burst), int64(count),
		int64(maxWait/time.Microsecond), nodeID).Scan(&own, &f, &k, &rateOK, &valid, &admitted, &waitUS, &startUS, &estUS)
	if err != nil {
		return 0, 0, s.fail(ctx, op, err)
	}
	switch {
	case !own:
		return 0, 0, fmt.Errorf("pgstore: %s: %w: %q has no live registration", op, ErrNotInPool, nodeID)
	case !(f > 0):
		return 0, 0, fmt.Errorf("pgstore: %s: %w", op, ErrNotInPool)
	case !rateOK:
		return 0, 0, invalid(op, "pool rate R*F = %v*%v = %v/s: below MinPoolRate %v/s", lim.Rate, f, lim.Rate*f, MinPoolRate)
	case !valid:
		return 0, 0, invalid(op, "count %d: more than the pool's burst share max(1, floor(B*F)) = %d (B %d, F %v)",
			count, max(1, k), lim.Burst, f)
	case !admitted:
		est := micros(estUS)
		if floor := maxWait.Truncate(time.Microsecond) + time.Microsecond; est < floor {
			est = floor
		}
		return 0, 0, &LimitExceededError{Key: key, Wait: est}
	}
	return micros(max(waitUS, 0)), startUS, nil
}

// checkPoolWant checks one key's limit and count for a pooled
// reservation; op names the reservation in the error.
func checkPoolWant(op string, lim fsm.Limit, count int) error {
	if err := lim.Validate(); err != nil {
		return invalidErr(op, err)
	}
	if count < 1 || count > lim.Burst {
		return invalid(op, "count %d: must be in [1, %d] (the burst)", count, lim.Burst)
	}
	return nil
}

// micros converts microseconds to a Duration, saturating instead of
// overflowing (a wait of absurd limits can exceed 292 years).
func micros(us int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case us > most:
		return math.MaxInt64
	case us < -most:
		return math.MinInt64
	}
	return time.Duration(us) * time.Microsecond
}
