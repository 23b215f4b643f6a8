package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/policy"
	"github.com/raftpace/raftpace/fsm"
)

// gateLoadFlags are the agent's load generators for the refusal gate and
// the concurrency caps (tests and demos), and its start-up policy file.
type gateLoadFlags struct {
	httpURLs   cmdline.List
	slotGroups cmdline.List
	loadgen.GateConfig
	policy string
}

func (g *gateLoadFlags) register(f *cmdline.Flags) {
	f.Var(&g.httpURLs, "load-http", "generate HTTP load: GET `URL` in a loop through client.Transport (paced by the\nURL's host:port as key, paused fleet-wide on 429/503, a slot per request when\nthe key has a cap); may repeat")
	f.IntVar(&g.HTTPWorkers, "load-http-workers", 4, "`N` goroutines per --load-http URL")
	f.Var(&g.slotGroups, "load-slots", "generate slot load: workers take one slot on each of `KEY[,KEY...]` at once,\nhold it, release it, in a loop; may repeat")
	f.IntVar(&g.SlotWorkers, "slot-workers", 2, "`N` goroutines per --load-slots group")
	f.DurationVar(&g.HoldMin, "slot-hold-min", 10*time.Millisecond, "shortest hold of a --load-slots slot (`DURATION`)")
	f.DurationVar(&g.HoldMax, "slot-hold-max", 50*time.Millisecond, "longest hold of a --load-slots slot (`DURATION`; random in between)")
	f.DurationVar(&g.SlotTTL, "slot-ttl", 5*time.Second, "TTL of each --load-slots slot (`DURATION`)")
	f.StringVar(&g.SlotLog, "slot-log", "", "append each --load-slots acquire and release to `FILE`:\n\"A unix_nanos node slot_id keys deadline_unix_nanos\" and \"R unix_nanos node slot_id\"")
	f.StringVar(&g.policy, "policy", "", "register the limits and caps in `FILE` at start-up (JSON:\n{\"limits\":{\"KEY\":{\"rate\":R,\"burst\":B}},\"caps\":{\"KEY\":N}}); a key the\ncluster already holds with other values is logged as an error and kept")
	f.WithEnv("load-http", "load-http-workers", "load-slots", "slot-workers", "slot-hold-min", "slot-hold-max", "slot-ttl", "slot-log", "policy")
}

// validate checks the flags, reports each problem to bad and fills in the
// URLs and slot groups of the GateConfig.
func (g *gateLoadFlags) validate(bad func(error)) {
	for _, u := range g.httpURLs.Items {
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
	for _, grp := range g.slotGroups.Items {
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
	if g.SlotLog != "" && len(g.slotGroups.Items) == 0 {
		bad(errors.New("--slot-log: only meaningful with --load-slots"))
	}
	if g.policy != "" {
		if _, err := policy.Read(g.policy); err != nil {
			bad(fmt.Errorf("--policy: %w", err))
		}
	}
}
