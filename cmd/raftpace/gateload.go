package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
)

// gateLoadFlags are the agent's load generators for the refusal gate and
// the concurrency caps (tests and demos), and its start-up policy file.
type gateLoadFlags struct {
	httpURLs   listFlag
	slotGroups listFlag
	loadgen.GateConfig
	policy string
}

func (g *gateLoadFlags) register(f *flags) {
	f.Var(&g.httpURLs, "load-http", "generate HTTP load: GET `URL` in a loop through client.Transport (paced by the\nURL's host:port as key, paused fleet-wide on 429/503, a slot per request when\nthe key has a cap); may repeat")
	f.IntVar(&g.HTTPWorkers, "load-http-workers", 4, "`N` goroutines per --load-http URL")
	f.Var(&g.slotGroups, "load-slots", "generate slot load: workers take one slot on each of `KEY[,KEY...]` at once,\nhold it, release it, in a loop; may repeat")
	f.IntVar(&g.SlotWorkers, "slot-workers", 2, "`N` goroutines per --load-slots group")
	f.DurationVar(&g.HoldMin, "slot-hold-min", 10*time.Millisecond, "shortest hold of a --load-slots slot (`DURATION`)")
	f.DurationVar(&g.HoldMax, "slot-hold-max", 50*time.Millisecond, "longest hold of a --load-slots slot (`DURATION`; random in between)")
	f.DurationVar(&g.SlotTTL, "slot-ttl", 5*time.Second, "TTL of each --load-slots slot (`DURATION`)")
	f.StringVar(&g.SlotLog, "slot-log", "", "append each --load-slots acquire and release to `FILE`:\n\"A unix_nanos node slot_id keys deadline_unix_nanos\" and \"R unix_nanos node slot_id\"")
	f.StringVar(&g.policy, "policy", "", "register the limits and caps in `FILE` at start-up (JSON:\n{\"limits\":{\"KEY\":{\"rate\":R,\"burst\":B}},\"caps\":{\"KEY\":N}}); a key the\ncluster already holds with other values is logged as an error and kept")
	f.withEnv("load-http", "load-http-workers", "load-slots", "slot-workers", "slot-hold-min", "slot-hold-max", "slot-ttl", "slot-log", "policy")
}

// validate checks the flags, reports each problem to bad and fills in the
// URLs and slot groups of the GateConfig.
func (g *gateLoadFlags) validate(bad func(error)) {
	for _, u := range g.httpURLs.items {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad(fmt.Errorf("--load-http %q: want an http:// or https:// URL with a host", u))
			continue
		}
		g.URLs = append(g.URLs, u)
	}
	if g.HTTPWorkers < 1 || g.HTTPWorkers > loadgen.MaxConcurrency {
		bad(fmt.Errorf("--load-http-workers %d: must be 1..%d", g.HTTPWorkers, loadgen.MaxConcurrency))
	}
	for _, grp := range g.slotGroups.items {
		keys, err := loadgen.SlotKeys(grp)
		if err != nil {
			bad(fmt.Errorf("--load-slots %q: %w", grp, err))
			continue
		}
		g.SlotGroups = append(g.SlotGroups, keys)
	}
	if g.SlotWorkers < 1 || g.SlotWorkers > loadgen.MaxConcurrency {
		bad(fmt.Errorf("--slot-workers %d: must be 1..%d", g.SlotWorkers, loadgen.MaxConcurrency))
	}
	if g.HoldMin < 0 || g.HoldMax < g.HoldMin {
		bad(fmt.Errorf("--slot-hold-min %v, --slot-hold-max %v: want 0 <= min <= max", g.HoldMin, g.HoldMax))
	}
	if g.SlotTTL <= 0 || g.SlotTTL > fsm.MaxSlotTTL {
		bad(fmt.Errorf("--slot-ttl %v: must be in (0, %v]", g.SlotTTL, fsm.MaxSlotTTL))
	}
	if g.SlotLog != "" && len(g.slotGroups.items) == 0 {
		bad(errors.New("--slot-log: only meaningful with --load-slots"))
	}
	if g.policy != "" {
		if _, err := readPolicy(g.policy); err != nil {
			bad(fmt.Errorf("--policy: %w", err))
		}
	}
}

// policyFile is the --policy document.
type policyFile struct {
	Limits map[string]struct {
		Rate  float64 `json:"rate"`
		Burst int     `json:"burst"`
	} `json:"limits"`
	Caps map[string]int `json:"caps"`
}

func readPolicy(path string) (policyFile, error) {
	var p policyFile
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
			errs = append(errs, fmt.Errorf("%s: limits: %w", path, err))
		} else if err := (fsm.Limit{Rate: l.Rate, Burst: l.Burst}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: limit %q: %w", path, k, err))
		}
	}
	for k, c := range p.Caps {
		if err := fsm.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: caps: %w", path, err))
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
func (g *gateLoadFlags) registerPolicy(ctx context.Context, n *node.Node, log *slog.Logger) error {
	if g.policy == "" {
		return nil
	}
	p, err := readPolicy(g.policy)
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
			if errors.Is(err, node.ErrPolicyConflict) {
				log.Error("policy file disagrees with the cluster; keeping the cluster's value", "err", err)
				continue
			}
			errs = append(errs, err)
		}
	}
	for k, m := range p.Caps {
		if err := c.RegisterCap(ctx, k, m); err != nil {
			if errors.Is(err, node.ErrPolicyConflict) {
				log.Error("policy file disagrees with the cluster; keeping the cluster's value", "err", err)
				continue
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Info("policy registered", "file", g.policy, "limits", len(p.Limits), "caps", len(p.Caps))
	return nil
}
