package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/fsm"
)

// PoolWant is one key of a pooled reservation over several keys: Count
// events of Key, whose limit is Limit.
type PoolWant struct {
	Key   string
	Limit fsm.Limit
	Count int
}

// ReservePooledAll reserves every want on the pool's cursors at one
// instant, or none: the keys' cursors are locked in key order (so two
// such reservations cannot deadlock), each key's earliest start is
// computed as ReservePooled computes it, and every key is granted as a
// GCRA request arriving at the latest of them, which keeps each cursor a
// conforming GCRA sequence. When that instant lies more than maxWait
// ahead nothing changes and the error is a *LimitExceededError naming the
// key that set it. One want is ReservePooled (one statement); several are
// one transaction of four statements.
func (s *Store) ReservePooledAll(ctx context.Context, nodeID string, wants []PoolWant, maxWait time.Duration) (time.Duration, error) {
	wait, _, err := s.reservePooledAll(ctx, nodeID, wants, maxWait)
	return wait, err
}

// reservePooledAll is ReservePooledAll that also returns the instant as
// microseconds since the Unix epoch on Postgres's clock (for tests).
func (s *Store) reservePooledAll(ctx context.Context, nodeID string, wants []PoolWant, maxWait time.Duration) (wait time.Duration, startUS int64, err error) {
	if len(wants) == 1 {
		w := wants[0]
		return s.reservePooled(ctx, nodeID, w.Key, w.Limit, w.Count, maxWait)
	}
	const op = "reserve pooled"
	if err := fsm.ValidateID(nodeID); err != nil {
		return 0, 0, invalidErr(op, err)
	}
	if len(wants) == 0 {
		return 0, 0, invalid(op, "no keys")
	}
	keys := make([]string, len(wants))
	for i, w := range wants {
		if err := fsm.ValidateKey(w.Key); err != nil {
			return 0, 0, invalidErr(op, err)
		}
		if err := checkPoolWant(fmt.Sprintf("%s %q", op, w.Key), w.Limit, w.Count); err != nil {
			return 0, 0, err
		}
		for _, k := range keys[:i] {
			if k == w.Key {
				return 0, 0, invalid(op, "key %q named twice", w.Key)
			}
		}
		keys[i] = w.Key
	}
	if maxWait < 0 {
		return 0, 0, invalid(op, "maxWait %v: must be >= 0", maxWait)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, 0, err
	}
	defer cancel()
	var refused error // the answer, not a failure: the transaction rolls back
	// Made and locked in key order, so that two reservations of several
	// keys cannot deadlock.
	slices.Sort(keys)
	err = pgx.BeginFunc(c, s.pool, func(tx pgx.Tx) error {
		var failed error
		wait, startUS, refused, failed = s.reserveAllTx(c, tx, op, nodeID, wants, keys, maxWait)
		if failed != nil {
			return failed
		}
		return refused // rolls back: a refusal changes nothing
	})
	if refused != nil && errors.Is(err, refused) {
		return 0, 0, refused
	}
	if err != nil {
		return 0, 0, s.fail(ctx, op, err)
	}
	return wait, startUS, nil
}

// reserveAllTx is ReservePooledAll's transaction. refused is a refusal
// the caller returns as it is (after the rollback); err is a failure.
func (s *Store) reserveAllTx(c context.Context, tx pgx.Tx, op, nodeID string, wants []PoolWant, keys []string, maxWait time.Duration) (wait time.Duration, startUS int64, refused, err error) {
	// The registrations counted, locked FOR KEY SHARE as in ReservePooled:
	// LeavePool and Fence wait for this reservation.
	var f float64
	var own bool
	if err := tx.QueryRow(c, s.q.poolFraction, s.cfg.Cluster, nodeID).Scan(&f, &own); err != nil {
		return 0, 0, nil, err
	}
	switch {
	case !own:
		return 0, 0, fmt.Errorf("pgstore: %s: %w: %q has no live registration", op, ErrNotInPool, nodeID), nil
	case !(f > 0):
		return 0, 0, fmt.Errorf("pgstore: %s: %w", op, ErrNotInPool), nil
	}
	if _, err := tx.Exec(c, s.q.poolCursorsMake, s.cfg.Cluster, keys); err != nil {
		return 0, 0, nil, err
	}
	rows, err := tx.Query(c, s.q.poolCursorsLock, s.cfg.Cluster, keys)
	if err != nil {
		return 0, 0, nil, err
	}
	tatOf := make(map[string]int64, len(keys))
	var nowUS int64
	for rows.Next() {
		var key string
		var tat int64
		if err := rows.Scan(&key, &tat, &nowUS); err != nil {
			rows.Close()
			return 0, 0, nil, err
		}
		tatOf[key] = tat
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, nil, err
	}
	// The arithmetic of ReservePooled's statement, in Go, per key.
	type grant struct{ iv, tol, tat int64 }
	g := make([]grant, len(wants))
	at, last := nowUS, 0
	for i, w := range wants {
		rf := w.Limit.Rate * f
		if rf < MinPoolRate {
			return 0, 0, invalid(fmt.Sprintf("%s %q", op, w.Key), "pool rate R*F = %v*%v = %v/s: below MinPoolRate %v/s", w.Limit.Rate, f, rf, MinPoolRate), nil
		}
		iv := int64(math.Ceil(1e6 / rf))
		k := int64(math.Floor(float64(w.Limit.Burst) * f))
		if int64(w.Count) > max(k, 1) {
			return 0, 0, invalid(fmt.Sprintf("%s %q", op, w.Key), "count %d: more than the pool's burst share max(1, floor(B*F)) = %d (B %d, F %v)", w.Count, max(k, 1), w.Limit.Burst, f), nil
		}
		tol := min(max(k-1, 0)*iv, maxToleranceUS)
		tat, ok := tatOf[w.Key]
		if !ok {
			return 0, 0, nil, fmt.Errorf("pool cursor %q not found after insert", w.Key)
		}
		g[i] = grant{iv: iv, tol: tol, tat: tat}
		if start := max(nowUS, tat+int64(w.Count-1)*iv-tol); start > at {
			at, last = start, i
		}
	}
	if d := micros(at - nowUS); d > maxWait {
		return 0, 0, &LimitExceededError{Key: wants[last].Key, Wait: d}, nil
	}
	newTAT := make(map[string]int64, len(wants))
	for i, w := range wants {
		newTAT[w.Key] = max(at, g[i].tat) + int64(w.Count)*g[i].iv
	}
	tats := make([]int64, len(keys)) // in keys' order, as the statement pairs them
	for i, k := range keys {
		tats[i] = newTAT[k]
	}
	if _, err := tx.Exec(c, s.q.poolCursorsSet, s.cfg.Cluster, keys, tats); err != nil {
		return 0, 0, nil, err
	}
	return micros(at - nowUS), at, nil, nil
}
