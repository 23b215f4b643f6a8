package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/node"
)

// gateLoadFlags are the agent's load generators for the refusal gate and
// the concurrency caps (tests and demos), and its start-up policy file.
type gateLoadFlags struct {
	httpURLs    listFlag
	httpWorkers int
	slotGroups  listFlag
	slotWorkers int
	slotHoldMin time.Duration
	slotHoldMax time.Duration
	slotTTL     time.Duration
	slotLog     string
	policy      string
}

func (g *gateLoadFlags) register(f *flags) {
	f.Var(&g.httpURLs, "load-http", "generate HTTP load: GET `URL` in a loop through client.Transport (paced by the\nURL's host:port as key, paused fleet-wide on 429/503, a slot per request when\nthe key has a cap); may repeat")
	f.IntVar(&g.httpWorkers, "load-http-workers", 4, "`N` goroutines per --load-http URL")
	f.Var(&g.slotGroups, "load-slots", "generate slot load: workers take one slot on each of `KEY[,KEY...]` at once,\nhold it, release it, in a loop; may repeat")
	f.IntVar(&g.slotWorkers, "slot-workers", 2, "`N` goroutines per --load-slots group")
	f.DurationVar(&g.slotHoldMin, "slot-hold-min", 10*time.Millisecond, "shortest hold of a --load-slots slot (`DURATION`)")
	f.DurationVar(&g.slotHoldMax, "slot-hold-max", 50*time.Millisecond, "longest hold of a --load-slots slot (`DURATION`; random in between)")
	f.DurationVar(&g.slotTTL, "slot-ttl", 5*time.Second, "TTL of each --load-slots slot (`DURATION`)")
	f.StringVar(&g.slotLog, "slot-log", "", "append each --load-slots acquire and release to `FILE`:\n\"A unix_nanos node slot_id keys deadline_unix_nanos\" and \"R unix_nanos node slot_id\"")
	f.StringVar(&g.policy, "policy", "", "register the limits and caps in `FILE` at start-up (JSON:\n{\"limits\":{\"KEY\":{\"rate\":R,\"burst\":B}},\"caps\":{\"KEY\":N}}); a key the\ncluster already holds with other values is logged as an error and kept")
	f.withEnv("load-http", "load-http-workers", "load-slots", "slot-workers", "slot-hold-min", "slot-hold-max", "slot-ttl", "slot-log", "policy")
}

func (g *gateLoadFlags) validate(bad func(error)) {
	for _, u := range g.httpURLs.items {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad(fmt.Errorf("--load-http %q: want an http:// or https:// URL with a host", u))
		}
	}
	if g.httpWorkers < 1 || g.httpWorkers > maxLoadConcurrency {
		bad(fmt.Errorf("--load-http-workers %d: must be 1..%d", g.httpWorkers, maxLoadConcurrency))
	}
	for _, grp := range g.slotGroups.items {
		if _, err := slotKeys(grp); err != nil {
			bad(fmt.Errorf("--load-slots %q: %w", grp, err))
		}
	}
	if g.slotWorkers < 1 || g.slotWorkers > maxLoadConcurrency {
		bad(fmt.Errorf("--slot-workers %d: must be 1..%d", g.slotWorkers, maxLoadConcurrency))
	}
	if g.slotHoldMin < 0 || g.slotHoldMax < g.slotHoldMin {
		bad(fmt.Errorf("--slot-hold-min %v, --slot-hold-max %v: want 0 <= min <= max", g.slotHoldMin, g.slotHoldMax))
	}
	if g.slotTTL <= 0 || g.slotTTL > fsm.MaxSlotTTL {
		bad(fmt.Errorf("--slot-ttl %v: must be in (0, %v]", g.slotTTL, fsm.MaxSlotTTL))
	}
	if g.slotLog != "" && len(g.slotGroups.items) == 0 {
		bad(errors.New("--slot-log: only meaningful with --load-slots"))
	}
	if g.policy != "" {
		if _, err := readPolicy(g.policy); err != nil {
			bad(fmt.Errorf("--policy: %w", err))
		}
	}
}

func slotKeys(group string) ([]string, error) {
	keys := strings.Split(group, ",")
	for _, k := range keys {
		if err := fsm.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	return keys, nil
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
	log.Info("policy registered", "file", g.policy, "limits", len(p.Limits), "caps", len(p.Caps))
	return nil
}

func (g *gateLoadFlags) active() bool {
	return len(g.httpURLs.items) > 0 || len(g.slotGroups.items) > 0
}

// run starts the HTTP and slot load; the returned function waits for it.
func (g *gateLoadFlags) run(ctx context.Context, n *node.Node, log *slog.Logger) (wait func() error, err error) {
	var slotLog io.Writer
	var f *os.File
	if g.slotLog != "" {
		f, err = os.OpenFile(g.slotLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--slot-log: %w", err)
		}
		slotLog = f
	}
	c := client.New(n)
	var wg sync.WaitGroup
	for _, u := range g.httpURLs.items {
		hc := &http.Client{Transport: client.Transport(nil, c, client.OnError(func(key string, err error) {
			log.Warn("recording a refusal failed", "key", key, "err", err)
		}))}
		for range g.httpWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				httpWorker(ctx, hc, u, log)
			}()
		}
	}
	var logMu sync.Mutex
	for _, grp := range g.slotGroups.items {
		keys, _ := slotKeys(grp)
		for range g.slotWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.slotWorker(ctx, c, n.ID(), keys, slotLog, &logMu, log)
			}()
		}
	}
	return func() error {
		wg.Wait()
		if f != nil {
			return f.Close()
		}
		return nil
	}, nil
}

func httpWorker(ctx context.Context, hc *http.Client, u string, log *slog.Logger) {
	tl := throttledLog{logger: log, every: 5 * time.Second}
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			log.Error("load-http request", "err", err)
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				tl.log(slog.LevelWarn, "load-http", err)
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (g *gateLoadFlags) slotWorker(ctx context.Context, c *client.Client, nodeID string, keys []string, out io.Writer, mu *sync.Mutex, log *slog.Logger) {
	tl := throttledLog{logger: log, every: 5 * time.Second}
	write := func(line string) {
		if out == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(out, line); err != nil {
			tl.log(slog.LevelError, "slot-log", err)
		}
	}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := c.Acquire(actx, keys, g.slotTTL)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, raftpace.ErrConcurrencyLimit) {
				tl.log(slog.LevelWarn, "load-slots", err)
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		s := h.Slot()
		write(fmt.Sprintf("A %d %s %s %s %d\n", time.Now().UnixNano(), nodeID, s.ID, strings.Join(s.Keys, ","), s.Deadline.UnixNano()))
		hold := g.slotHoldMin
		if d := g.slotHoldMax - g.slotHoldMin; d > 0 {
			hold += rand.N(d)
		}
		// Never hold past the slot's deadline: the cap is only promised
		// that long.
		hold = min(hold, time.Until(s.Deadline)-10*time.Millisecond)
		sleep(ctx, hold)
		write(fmt.Sprintf("R %d %s %s\n", time.Now().UnixNano(), nodeID, s.ID))
		h.Release()
	}
}
