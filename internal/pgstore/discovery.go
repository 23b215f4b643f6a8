package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/fsm"
)

// PublishAddress records that node nodeID of this cluster listens for raft
// and RPC on raftAddr and for gossip on gossipAddr, stamped with
// updated_at = clock_timestamp(). Members call it at start and then
// periodically, so that DiscoverGossip's maxAge tells live from stale.
// The id follows fsm.ValidateID; both addresses must be host:port as for
// fsm.Member.Addr.
func (s *Store) PublishAddress(ctx context.Context, nodeID, raftAddr, gossipAddr string) error {
	const op = "publish address"
	if err := (fsm.Member{ID: nodeID, Addr: raftAddr}).Validate(); err != nil {
		return invalidErr(op+": raft address", err)
	}
	if err := (fsm.Member{ID: nodeID, Addr: gossipAddr}).Validate(); err != nil {
		return invalidErr(op+": gossip address", err)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.pool.Exec(c, s.q.publish, s.cfg.Cluster, nodeID, raftAddr, gossipAddr); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// DiscoverGossip returns the gossip addresses of this cluster's members
// whose address was published within maxAge (measured on Postgres's
// clock), newest first, without repeats. maxAge must be positive.
func (s *Store) DiscoverGossip(ctx context.Context, maxAge time.Duration) ([]string, error) {
	const op = "discover gossip"
	if maxAge <= 0 {
		return nil, invalid(op, "maxAge %v: must be > 0", maxAge)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	rows, _ := s.pool.Query(c, s.q.discover, s.cfg.Cluster, int64(maxAge/time.Microsecond))
	addrs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	seen := make(map[string]bool, len(addrs))
	out := addrs[:0]
	for _, a := range addrs {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// ForgetAddress deletes nodeID's published address (a member that leaves
// the cluster calls it). Forgetting an unknown id is not an error.
func (s *Store) ForgetAddress(ctx context.Context, nodeID string) error {
	const op = "forget address"
	if err := fsm.ValidateID(nodeID); err != nil {
		return invalidErr(op, err)
	}
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.pool.Exec(c, s.q.forget, s.cfg.Cluster, nodeID); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}
