package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/pgstore"
)

// A member in fallback that reaches Postgres pools its fraction with the
// others and paces on the shared cursor. (Compiled, not run: it needs a
// server.)
func Example() {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgstore.Config{
		URL:     "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		Cluster: "prod",
	})
	if err != nil {
		fmt.Println(err) // wraps pgstore.ErrUnavailable when Postgres is down
		return
	}
	defer s.Close()

	if err := s.JoinPool(ctx, "node-1", 0.25, 2*time.Second); err != nil {
		fmt.Println(err)
		return
	}
	lim := fsm.Limit{Rate: 100, Burst: 10}
	wait, err := s.ReservePooled(ctx, "node-1", "google-images", lim, 1, 200*time.Millisecond)
	var le *pgstore.LimitExceededError
	switch {
	case errors.As(err, &le):
		fmt.Println("shed; retry in", le.Wait)
	case err != nil:
		fmt.Println(err)
	default:
		time.Sleep(wait) // measured from when the answer arrived
	}

	busy, err := s.LeavePool(ctx, "node-1")
	if err == nil {
		time.Sleep(busy) // only then hand the fraction back to the leader
	}
}
