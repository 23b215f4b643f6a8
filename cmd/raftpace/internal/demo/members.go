package demo

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
)

// recorder keeps every admitted event of one node in memory.
type recorder struct {
	node  string
	count atomic.Uint64
	store *eventStore
}

func (r *recorder) Record(key string, at time.Time) error {
	r.count.Add(1)
	r.store.add(timeline.Event{At: at.UnixNano(), Node: r.node, Key: key})
	return nil
}

type eventStore struct {
	mu     sync.Mutex
	events []timeline.Event
}

func (s *eventStore) add(e timeline.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *eventStore) all() []timeline.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timeline.Event(nil), s.events...)
}

// member is one node of the demo and its load. Only the demo's main
// loop touches it.
type member struct {
	cfg  node.Config // as first started, with the addresses it bound (a restart reuses them)
	n    *node.Node  // nil while killed
	rec  *recorder
	stop context.CancelFunc // ends its load
	wait func()             // waits for its load goroutines to end
}

func (m *member) id() string { return m.cfg.NodeID }

// startLoad starts the member's load: d.Concurrency goroutines calling
// Wait(d.Key) in a loop on its node, until ctx ends or stop is called.
func (m *member) startLoad(ctx context.Context, d Config, logger *slog.Logger) {
	lctx, cancel := context.WithCancel(ctx)
	m.stop = cancel
	m.wait = loadgen.StartNode(lctx, m.n, []loadgen.Spec{{Key: d.Key, Concurrency: d.Concurrency}}, "raft", m.rec, logger)
}

// nodeID is the id of the demo's i-th node (from 0).
func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// startNodes starts count nodes on loopback; the others join the
// first. The configs it keeps name the addresses each node bound. With
// tlsDir (certs.WriteThrowaway's files) the nodes use TLS and encrypted
// gossip.
func startNodes(dir, tlsDir string, count int, timing node.Timing, logger *slog.Logger) ([]*member, error) {
	var members []*member
	for i := range count {
		id := nodeID(i)
		cfg := node.Config{
			NodeID:          id,
			DataDir:         filepath.Join(dir, id),
			BindAddr:        "127.0.0.1:0",
			GossipBindAddr:  "127.0.0.1:0",
			BootstrapExpect: count,
			Timing:          timing,
			UseGrace:        UseGrace,
			Logger:          logger,
		}
		if tlsDir != "" {
			cfg.TLSCAFile = filepath.Join(tlsDir, "ca.pem")
			cfg.TLSCertFile = filepath.Join(tlsDir, id+".pem")
			cfg.TLSKeyFile = filepath.Join(tlsDir, id+"-key.pem")
			cfg.GossipKeyFile = filepath.Join(tlsDir, "gossip.key")
		}
		if i > 0 {
			cfg.Join = []string{members[0].n.GossipAddr()}
		}
		n, err := node.New(cfg)
		if err != nil {
			return members, fmt.Errorf("starting node %s: %w", id, err)
		}
		cfg.BindAddr, cfg.GossipBindAddr = n.Addr(), n.GossipAddr()
		members = append(members, &member{cfg: cfg, n: n})
	}
	return members, nil
}

// liveNodes returns the members' nodes that are running.
func liveNodes(members []*member) []*node.Node {
	var nodes []*node.Node
	for _, m := range members {
		if m.n != nil {
			nodes = append(nodes, m.n)
		}
	}
	return nodes
}

// closeNodes closes every node, in parallel.
func closeNodes(nodes []*node.Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Close() })
	}
	wg.Wait()
}
