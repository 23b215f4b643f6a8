package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// Witness records a heartbeat of nodeID (seen_at = clock_timestamp(),
// never earlier than before) and reports whether the member is fenced.
// It never clears a fence; only Unfence does.
//
// A member cut off from the leader may pace locally for a licence L
// measured from its own clock read before the call (the send time), but
// only after a call that succeeded with fenced false. A call that reports
// fenced true voids the licence: the member must stop spending its
// fraction away from the leader at once. The leader's Fence counts L from
// the stored seen_at, which is never before the send time.
func (s *Store) Witness(ctx context.Context, nodeID string) (fenced bool, err error) {
	const op = "witness"
	if err := fsm.ValidateID(nodeID); err != nil {
		return false, invalidErr(op, err)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return false, err
	}
	defer cancel()
	if err := s.pool.QueryRow(c, s.q.witness, s.cfg.Cluster, nodeID).Scan(&fenced); err != nil {
		return false, s.fail(ctx, op, err)
	}
	return fenced, nil
}

// FenceResult is Fence's answer.
type FenceResult struct {
	// Fenced reports whether the member is fenced now: this call fenced
	// it, or it already was. When false nothing changed and Reason says
	// why (it looks alive to Postgres).
	Fenced bool
	// Wait is how long the caller must still wait, counted from when
	// Fence's answer arrives, before it spends the member's fraction:
	// until the licence of the member's last unfenced heartbeat is over
	// (seen_at + licence on Postgres's clock) and until every pool slot
	// that may have been paced counting the member's fraction has begun
	// (as LeavePool's busy). 0 when Fenced is false.
	Wait time.Duration
	// LastSeen is how long before the statement the member's last
	// heartbeat (Witness or JoinPool) was, at least 0; -1 if it never had
	// one.
	LastSeen time.Duration
	// Reason says in words why the member was or was not fenced, for logs:
	// "seen 300ms ago", "registered in the pool", "last seen 4.2s ago",
	// "never seen", "already fenced, last seen 8s ago".
	Reason string
}

// Fence takes nodeID's fallback fraction away from it, if it looks dead to
// Postgres: its last heartbeat is older than stale and it has no live pool
// registration. Then, in one transaction, it marks the member fenced
// (creating its witness row if it never had one), deletes its pool
// registration, and returns the Wait the leader must still observe. After
// a fence the member's Witness calls report fenced, JoinPool fails with
// ErrFenced, and ReservePooled refuses it (ErrNotInPool), until Unfence.
// A member that is fenced already is fenced again whatever its heartbeats:
// those gave it no licence, and the Wait computed from them only errs late.
// When the member looks alive nothing changes and Fenced is false.
//
// stale and licence must be > 0; both are rounded up to the microsecond.
// licence must be at least the licence members take from a heartbeat.
//
// Why it is atomic under READ COMMITTED, against Witness, JoinPool and
// ReservePooled of the same member on other connections: every writer of
// the member's fence state or registration takes the lock of its witness
// row first (Witness and JoinPool by their upsert, which JoinPool holds
// until it has registered and committed), and Fence takes it first too, by
// an upsert, and holds it to commit. So each such call either committed
// before Fence got the lock — and Fence's next statement, whose snapshot is
// taken after the lock, sees its seen_at and registration (and refuses as
// "seen") — or it waits for Fence to commit and then finds fenced true
// (JoinPool registers nothing). The state is read in a statement after the
// locking one on purpose: a single SELECT ... FOR UPDATE would re-read
// only the locked row after waiting, and its subquery on pool_members
// would still use the snapshot from before the wait. Reservations lock the
// registrations they count FOR KEY SHARE: the DELETE waits for those in
// flight, and the wait is read by a later statement, after them; a
// reservation that reaches the member's registration after the DELETE
// finds it gone and refuses (own registration not live). Heartbeats and
// JoinPool calls of the member that a fence refuses leave seen_at later,
// never earlier, so Wait only grows.
func (s *Store) Fence(ctx context.Context, nodeID string, stale, licence time.Duration) (FenceResult, error) {
	const op = "fence"
	var errs []error
	if err := fsm.ValidateID(nodeID); err != nil {
		errs = append(errs, invalidErr(op, err))
	}
	if stale <= 0 {
		errs = append(errs, invalid(op, "stale %v: must be > 0", stale))
	}
	if licence <= 0 {
		errs = append(errs, invalid(op, "licence %v: must be > 0", licence))
	}
	if err := errors.Join(errs...); err != nil {
		return FenceResult{}, err
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return FenceResult{}, err
	}
	defer cancel()

	var res FenceResult
	err = func() error {
		tx, err := s.pool.Begin(c)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(c) }() // after Commit, a no-op
		if _, err := tx.Exec(c, s.q.fenceLock, s.cfg.Cluster, nodeID); err != nil {
			return err
		}
		var (
			fenced, fresh, registered bool
			seenUS                    int64
		)
		if err := tx.QueryRow(c, s.q.fenceRead, s.cfg.Cluster, nodeID, ceilMicros(stale)).
			Scan(&fenced, &fresh, &seenUS, &registered); err != nil {
			return err
		}
		res.LastSeen = -1
		if seenUS >= 0 {
			res.LastSeen = micros(seenUS)
		}
		switch {
		case registered:
			res.Reason = "registered in the pool"
			return nil // rolled back: nothing changed
		case fresh && !fenced:
			res.Reason = fmt.Sprintf("seen %v ago", res.LastSeen)
			return nil
		case fenced:
			res.Reason = "already fenced, " + lastSeen(res.LastSeen)
		default:
			res.Reason = lastSeen(res.LastSeen)
		}
		if _, err := tx.Exec(c, s.q.fenceApply, s.cfg.Cluster, nodeID); err != nil {
			return err
		}
		var licenceUS, busyUS int64
		if err := tx.QueryRow(c, s.q.fenceWait, s.cfg.Cluster, nodeID, ceilMicros(licence)).Scan(&licenceUS, &busyUS); err != nil {
			return err
		}
		if err := tx.Commit(c); err != nil {
			return err
		}
		res.Fenced, res.Wait = true, micros(max(licenceUS, busyUS, 0))
		return nil
	}()
	if err != nil {
		return FenceResult{}, s.fail(ctx, fmt.Sprintf("fence %q", nodeID), err)
	}
	return res, nil
}

// lastSeen renders FenceResult.LastSeen for a Reason.
func lastSeen(d time.Duration) string {
	if d < 0 {
		return "never seen"
	}
	return fmt.Sprintf("last seen %v ago", d)
}

// Unfence lifts a fence on nodeID: its next Witness reports fenced false
// and JoinPool registers it again. The leader calls it before it gives the
// member a fraction again. A member without a fence (or never seen) is
// left as it is.
func (s *Store) Unfence(ctx context.Context, nodeID string) error {
	const op = "unfence"
	if err := fsm.ValidateID(nodeID); err != nil {
		return invalidErr(op, err)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.pool.Exec(c, s.q.unfence, s.cfg.Cluster, nodeID); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}
