package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
)

// PolicyFile is the --policy document: limits and caps to register at
// start-up.
type PolicyFile struct {
	Limits map[string]struct {
		Rate  float64 `json:"rate"`
		Burst int     `json:"burst"`
	} `json:"limits"`
	Caps map[string]int `json:"caps"`
}

// ReadPolicy reads and checks a policy file: every key, limit and cap.
func ReadPolicy(path string) (PolicyFile, error) {
	var p PolicyFile
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return p, fmt.Errorf("%s: trailing data after the JSON object", path)
	}
	var errs []error
	for k, l := range p.Limits {
		if l.Burst == 0 {
			l.Burst = 1
		}
		if err := fsm.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: limits: %s", path, strings.TrimPrefix(err.Error(), "fsm: ")))
			continue
		}
		lim := fsm.Limit{Rate: l.Rate, Burst: l.Burst}
		problems := lim.Explain("rate", "burst")
		if err := fsm.CheckMinRate(l.Rate); len(problems) == 0 && err != nil {
			problems = append(problems, err.Error())
		}
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%s: limit %q: %s", path, k, p))
		}
	}
	for k, c := range p.Caps {
		if err := fsm.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: caps: %s", path, strings.TrimPrefix(err.Error(), "fsm: ")))
		} else if c < 1 || c > fsm.MaxCap {
			errs = append(errs, fmt.Errorf("%s: cap %q: %d must be 1..%d", path, k, c, fsm.MaxCap))
		}
	}
	return p, errors.Join(errs...)
}

// registerPolicy registers the policy file's limits and caps once the
// cluster has a leader. A conflict is logged and the cluster's value kept:
// an operator may have changed the key at run time on purpose, and a
// restarting worker must not undo that or refuse to start.
func registerPolicy(ctx context.Context, n *node.Node, path string, log *slog.Logger) error {
	p, err := ReadPolicy(path)
	if err != nil {
		return err
	}
	if _, err := n.WaitForLeader(ctx); err != nil {
		return err
	}
	c := client.New(n)
	var errs []error
	for k, l := range p.Limits {
		lim := fsm.Limit{Rate: l.Rate, Burst: max(l.Burst, 1)}
		if err := c.Register(ctx, k, lim); err != nil {
			if errors.Is(err, raftpace.ErrPolicyConflict) {
				log.Error("policy file disagrees with the cluster; keeping the cluster's value", "err", err)
				continue
			}
			errs = append(errs, err)
		}
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
