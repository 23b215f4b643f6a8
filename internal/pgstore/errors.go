package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every error this package returns starts with "pgstore: "
// and wraps one of these (test with errors.Is), and where Postgres or pgx
// produced it, the original error too.
var (
	// ErrUnavailable: Postgres could not be reached or did not answer in
	// time: a refused or dropped connection, a timeout (StatementTimeout or
	// the caller's context), a server shutting down or out of resources, a
	// statement cancelled, a serialization failure or deadlock. The call had
	// no effect or an unknown one (a transaction either committed whole or
	// not at all); retrying later is right. The node treats it as "Postgres
	// is down" and moves to the next fallback tier.
	ErrUnavailable = errors.New("postgres unavailable")

	// ErrInvalid: an argument or a Config field breaks a rule; the message
	// names it, its value and the rule. Nothing was sent to Postgres.
	// ReservePooled also returns it for a count above the pool's burst
	// share and for a pool rate R*F below MinPoolRate, which only Postgres
	// can tell.
	ErrInvalid = errors.New("invalid input")

	// ErrNotInPool: ReservePooled found no unexpired pool registration of
	// the caller itself (it never joined, its registration lapsed, it left,
	// or Fence deleted it), or none with a fraction above 0 in the cluster
	// (F = 0, so the pool has no rate to pace at). It reserved nothing.
	ErrNotInPool = errors.New("not in the fallback pool")

	// ErrFenced: JoinPool found the member fenced (see Fence): the leader
	// has taken its fraction back, so it may neither pool nor pace away
	// from the leader until the leader lifts the fence (Unfence). It
	// registered nothing.
	ErrFenced = errors.New("fenced")

	// ErrLimitExceeded: ReservePooled would have had to wait longer than
	// maxWait; it consumed nothing. The error is a *LimitExceededError
	// carrying the wait.
	ErrLimitExceeded = errors.New("limit exceeded")

	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("store closed")
)

// LimitExceededError is returned by ReservePooled when the reservation
// would start more than maxWait from now. It consumed nothing.
type LimitExceededError struct {
	Key string
	// Wait is how long from the moment of the statement (Postgres's clock)
	// the reservation would have had to wait: always more than maxWait.
	// When another member moved the cursor at the same moment it may be an
	// underestimate; it is a hint for when to retry, not a promise.
	Wait time.Duration
}

func (e *LimitExceededError) Error() string {
	return fmt.Sprintf("pgstore: reserve pooled %q: %v: would wait %v", e.Key, ErrLimitExceeded, e.Wait)
}

// Unwrap returns ErrLimitExceeded.
func (e *LimitExceededError) Unwrap() error { return ErrLimitExceeded }

// invalid builds an ErrInvalid error: "pgstore: <op>: invalid input: <detail>".
func invalid(op string, format string, args ...any) error {
	return fmt.Errorf("pgstore: %s: %w: %s", op, ErrInvalid, fmt.Sprintf(format, args...))
}

// invalidErr wraps an error of package fsm (which wraps its own sentinel)
// into ErrInvalid.
func invalidErr(op string, err error) error {
	return fmt.Errorf("pgstore: %s: %w: %w", op, ErrInvalid, err)
}

// translate turns an error from pgx into this package's: connection and
// timeout errors wrap ErrUnavailable; everything else is wrapped as is.
// Both keep the original error in the chain. timeout is the
// StatementTimeout that applied, named in the message when it ran out.
func translate(op string, err error, timeout time.Duration) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return fmt.Errorf("pgstore: %s: %w: no answer within %v: %w", op, ErrUnavailable, timeout, err)
	}
	if unavailable(err) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// unavailable reports whether err means Postgres could not be reached or
// did not answer in time, as opposed to Postgres refusing the statement.
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) >= 2 && pgErr.Code[:2] == "08": // connection exception
			return true
		case len(pgErr.Code) >= 2 && pgErr.Code[:2] == "53": // insufficient resources (too many connections, ...)
			return true
		}
		switch pgErr.Code {
		case "57014", // query_canceled (statement_timeout)
			"57P01", // admin_shutdown
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now (starting up, recovering)
			"55P03", // lock_not_available (lock_timeout)
			"40001", // serialization_failure
			"40P01": // deadlock_detected
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		pgconn.Timeout(err), pgconn.SafeToRetry(err),
		errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return true
	}
	// A connection pgx already closed after a failed or cancelled statement.
	return errors.Is(err, pgconn.ErrConnClosed)
}
