// Package nodetest runs several raftpace nodes in one test process over
// real TCP on loopback: ports from 127.0.0.1:0, data dirs from t.TempDir(),
// short raft timers. RAFTPACE_TEST_LOG=1 sends the nodes' logs to stderr.
// It is for fast tests; the tests users believe run real
// processes of the built binary (cmd/raftpace).
//
// It sits beside node as net/http/httptest sits beside net/http: it imports
// node and the standard library only, and nothing outside tests imports it.
// node's own tests use it from the external test package node_test; a test
// in package node itself cannot import it (that would be an import cycle).
package nodetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
)

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*node.Node
	cfgs  []node.Config
}

// Option changes the config of every node before it starts.
type Option func(i int, c *node.Config)

// New starts size nodes that bootstrap one cluster together and waits until
// every node is ready (report.Status.Ready: a leader that grants and holds
// a share of the rate, known to all), as an agent's /readyz does. Nodes
// are closed when the test ends.
func New(t testing.TB, size int, opts ...Option) *Cluster {
	t.Helper()
	c := &Cluster{t: t, nodes: make([]*node.Node, size), cfgs: make([]node.Config, size)}
	dir := t.TempDir()
	var join []string
	for i := 0; i < size; i++ {
		cfg := node.Config{
			NodeID:          fmt.Sprintf("n%d", i+1),
			DataDir:         filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			BindAddr:        "127.0.0.1:0",
			GossipBindAddr:  "127.0.0.1:0",
			BootstrapExpect: size,
			Join:            join,
			Timing:          node.FastTiming(),
			HorizonAhead:    300 * time.Millisecond,
		}
		if os.Getenv("RAFTPACE_TEST_LOG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		for _, o := range opts {
			o(i, &cfg)
		}
		n, err := node.New(cfg)
		if err != nil {
			t.Fatalf("nodetest: start node %d: %v", i+1, err)
		}
		// Restarts must come back on the same addresses: raft's
		// configuration names them.
		cfg.BindAddr, cfg.GossipBindAddr = n.Addr(), n.GossipAddr()
		c.nodes[i], c.cfgs[i] = n, cfg
		if i == 0 {
			join = []string{n.GossipAddr()}
		}
	}
	t.Cleanup(c.Close)
	c.Leader()
	c.Ready()
	return c
}

// Ready waits (up to 20 s) until every live node reports itself ready
// (report.Status.Ready).
func (c *Cluster) Ready() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		why := ""
		c.mu.Lock()
		nodes := append([]*node.Node(nil), c.nodes...)
		c.mu.Unlock()
		for _, n := range nodes {
			if n == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := n.Status(ctx)
			cancel()
			if err != nil {
				why = err.Error()
				break
			}
			if ok, reason := st.Ready(); !ok {
				why = st.ID + ": " + reason
				break
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nodetest: not ready within 20s: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Node returns node i (0-based); nil if it is killed.
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Size is the number of nodes, live or killed.
func (c *Cluster) Size() int { return len(c.nodes) }

// Leader waits (up to 20 s) for a live node that leads and grants and returns
// its index.
func (c *Cluster) Leader() int {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for i, n := range c.nodes {
			if n != nil && n.IsLeader() {
				c.mu.Unlock()
				return i
			}
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("nodetest: no leader within 20s")
	return -1
}

// Followers returns the indexes of live nodes that are not the leader.
func (c *Cluster) Followers() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, n := range c.nodes {
		if n != nil && !n.IsLeader() {
			out = append(out, i)
		}
	}
	return out
}

// Kill closes node i without leaving the cluster, as a crash would.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n != nil {
		if err := n.Close(); err != nil {
			c.t.Logf("nodetest: close n%d: %v", i+1, err)
		}
	}
}

// Restart starts node i again with its data dir and addresses.
func (c *Cluster) Restart(i int) *node.Node {
	c.t.Helper()
	c.Kill(i)
	cfg := c.cfgs[i]
	cfg.Join = nil
	for j, o := range c.cfgs {
		if j != i {
			cfg.Join = append(cfg.Join, o.GossipBindAddr)
		}
	}
	var n *node.Node
	var err error
	// The old listeners may take a moment to release their ports.
	for try := 0; try < 50; try++ {
		if n, err = node.New(cfg); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("nodetest: restart n%d: %v", i+1, err)
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	return n
}

// Close closes every live node.
func (c *Cluster) Close() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
