package agent

import (
	"context"
	"errors"
	"log/slog"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/policy"
	"github.com/raftpace/raftpace/node"
)

// registerPolicy registers the policy file's limits and caps once the
// cluster has a leader. A conflict is logged and the cluster's value kept:
// an operator may have changed the key at run time on purpose, and a
// restarting worker must not undo that or refuse to start.
func registerPolicy(ctx context.Context, n *node.Node, path string, log *slog.Logger) error {
	p, err := policy.Read(path)
	if err != nil {
		return err
	}
	if _, err := n.WaitForLeader(ctx); err != nil {
		return err
	}
	c := client.New(n)
	limits := make(map[string]client.Limit, len(p.Limits))
	for k, l := range p.Limits {
		limits[k] = l.Limit()
	}
	var errs []error
	for _, err := range c.RegisterAll(ctx, limits) {
		if errors.Is(err, raftpace.ErrPolicyConflict) {
			log.Error("policy file disagrees with the cluster; keeping the cluster's value", "err", err)
			continue
		}
		errs = append(errs, err)
	}
	for k, m := range p.Caps {
		if err := c.RegisterCap(ctx, k, m); err != nil {
			if errors.Is(err, raftpace.ErrPolicyConflict) {
				log.Error("policy file disagrees with the cluster; keeping the cluster's value", "err", err)
				continue
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Info("policy registered", "file", path, "limits", len(p.Limits), "caps", len(p.Caps))
	return nil
}
