package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/node/report"
)

// agentProc is one `raftpace agent` process of a bench cluster.
type agentProc struct {
	*proc
	id       string
	ready    agentReady
	report   string // its --load-report
	timeline string // its --timeline, or ""
}

// agentReady is the agent's --ready-file document.
type agentReady struct {
	NodeID     string `json:"node_id"`
	Addr       string `json:"addr"`
	GossipAddr string `json:"gossip_addr"`
	HTTPAddr   string `json:"http_addr"`
	PID        int    `json:"pid"`
}

func (a *agentProc) admin() *admin.Client { return &admin.Client{Addr: a.ready.HTTPAddr} }

// cluster is a set of agent processes forming one raftpace cluster.
type cluster struct {
	agents []*agentProc
}

// clusterSpec describes a cluster to start.
type clusterSpec struct {
	dir      string
	size     int
	timeline bool // each agent writes a (buffered) timeline
	// args returns agent i's extra flags (its load, --no-leases, ...).
	args func(i int, id string) []string
}

// startCluster starts spec.size agents of bin on loopback (ports chosen by
// the OS, data in spec.dir): the first three with --bootstrap-expect 3
// (fewer if the cluster is smaller), the rest joining them as nonvoters. It
// returns once every agent knows the same leader and the leader grants.
func startCluster(ctx context.Context, bin string, spec clusterSpec) (*cluster, error) {
	c := &cluster{}
	expect := min(spec.size, 3)
	for i := range spec.size {
		id := "n" + strconv.Itoa(i+1)
		a := &agentProc{id: id, report: filepath.Join(spec.dir, id+".load.json")}
		args := []string{"agent", "--node-id", id,
			"--data-dir", filepath.Join(spec.dir, id),
			"--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0", "--http", "127.0.0.1:0",
			"--ready-file", filepath.Join(spec.dir, id+".ready.json"),
			"--log-level", "warn",
		}
		var extra []string
		if spec.args != nil {
			extra = spec.args(i, id)
		}
		if slices.Contains(extra, "--load") { // the agent refuses a report without a load
			args = append(args, "--load-report", a.report)
		}
		if i < expect {
			args = append(args, "--bootstrap-expect", strconv.Itoa(expect))
		}
		if i > 0 {
			args = append(args, "--join", c.agents[0].ready.GossipAddr)
		}
		if spec.timeline {
			a.timeline = filepath.Join(spec.dir, id+".timeline")
			args = append(args, "--timeline", a.timeline, "--timeline-buffer")
		}
		args = append(args, extra...)
		p, err := startProc("agent "+id, bin, args, filepath.Join(spec.dir, id+".log"))
		if err != nil {
			c.stop()
			return nil, err
		}
		a.proc = p
		c.agents = append(c.agents, a)
		if err := readJSONFile(ctx, p, filepath.Join(spec.dir, id+".ready.json"), &a.ready, 30*time.Second); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.waitLeader(ctx, 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitLeader waits until every agent reports the same leader, the leader
// says it grants, and every agent is a member of the raft configuration.
func (c *cluster) waitLeader(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for {
		ok, why := c.settled(ctx)
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: cluster not ready within %v: %s", d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *cluster) settled(ctx context.Context) (bool, string) {
	leader := ""
	for _, a := range c.agents {
		if a.exited() {
			return false, fmt.Sprintf("%s exited (%v)\n%s", a.id, a.err, a.tail())
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := a.admin().Status(sctx)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", a.id, err)
		}
		if st.Leader == "" || (leader != "" && st.Leader != leader) {
			return false, fmt.Sprintf("%s: leader %q", a.id, st.Leader)
		}
		leader = st.Leader
		if st.ID == leader && !st.Granting {
			return false, fmt.Sprintf("%s leads but does not grant yet", a.id)
		}
		member := 0
		for _, m := range st.Members {
			if m.Role == "voter" || m.Role == "nonvoter" {
				member++
			}
		}
		if member != len(c.agents) {
			return false, fmt.Sprintf("%s: %d of %d agents are members", a.id, member, len(c.agents))
		}
	}
	return true, ""
}

// leader returns the agent that leads, and the others.
func (c *cluster) roles(ctx context.Context) (leader *agentProc, followers []*agentProc, err error) {
	st, err := c.agents[0].admin().Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: status: %w", err)
	}
	for _, a := range c.agents {
		if a.id == st.Leader {
			leader = a
		} else {
			followers = append(followers, a)
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("bench: leader %q is not one of the agents", st.Leader)
	}
	return leader, followers, nil
}

// setLimit sets key's limit through the first agent's admin API (what
// `raftpace limit set` does) and waits until every agent has applied it.
func (c *cluster) setLimit(ctx context.Context, key string, lim client.Limit) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.agents[0].admin().SetLimit(sctx, key, lim); err != nil {
		return fmt.Errorf("bench: limit set %s: %w", key, err)
	}
	for _, a := range c.agents {
		for {
			got, err := a.admin().Limit(sctx, key)
			if err == nil && got == lim {
				break
			}
			if sctx.Err() != nil {
				return fmt.Errorf("bench: limit %s not applied on %s: %v", key, a.id, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// stats returns every agent's counters.
func (c *cluster) stats(ctx context.Context) (map[string]report.Stats, error) {
	out := make(map[string]report.Stats)
	for _, a := range c.agents {
		st, err := a.admin().Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("bench: status of %s: %w", a.id, err)
		}
		out[a.id] = st.Stats
	}
	return out, nil
}

// stop stops every agent (SIGTERM; each writes its load report and
// flushes its timeline) and returns the first error.
func (c *cluster) stop() error {
	var first error
	for _, a := range c.agents {
		a.terminate()
	}
	for _, a := range c.agents {
		if err := a.stop(15 * time.Second); err != nil && first == nil {
			first = fmt.Errorf("bench: agent %s: %w\n%s", a.id, err, a.tail())
		}
	}
	return first
}

// reports reads every agent's load report.
func (c *cluster) reports() ([]*LoadReport, error) {
	var out []*LoadReport
	for _, a := range c.agents {
		r, err := ReadLoadReport(a.report)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (c *cluster) timelines() []string {
	var out []string
	for _, a := range c.agents {
		if a.timeline != "" {
			out = append(out, a.timeline)
		}
	}
	return out
}

// waitKeyDone polls an agent's load report until key's load has ended.
func waitKeyDone(ctx context.Context, p *proc, path, key string, d time.Duration) (*KeyLoad, error) {
	rep, err := waitKeysDone(ctx, p, path, []string{key}, d)
	if err != nil {
		return nil, err
	}
	return rep.Keys[key], nil
}

// waitKeysDone polls an agent's load report until the load of every key
// has ended, and returns the report. One read covers all keys: with 1,000
// keys the report is large, and the agent rewrites it as each key ends.
func waitKeysDone(ctx context.Context, p *proc, path string, keys []string, d time.Duration) (*LoadReport, error) {
	deadline := time.Now().Add(d)
	for {
		running := keys
		if rep, err := ReadLoadReport(path); err == nil {
			running = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
				kl := rep.Keys[k]
				return kl != nil && kl.To != 0
			})
			if len(running) == 0 {
				return rep, nil
			}
		}
		if p.exited() {
			return nil, fmt.Errorf("%s exited (%v)\n%s", p.name, p.err, p.tail())
		}
		if time.Now().After(deadline) {
			which := running[0]
			if len(running) > 1 {
				which += fmt.Sprintf(" (and %d other keys)", len(running)-1)
			}
			return nil, fmt.Errorf("%s: the load of %s did not end within %v\n%s", p.name, which, d, p.tail())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
