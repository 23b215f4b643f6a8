package node_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// logBuffer is a log destination the test reads while nodes write it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLog waits up to d for a line of buf holding every one of parts.
func waitLog(t *testing.T, buf *logBuffer, d time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, line := range strings.Split(buf.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v; log:\n%s", parts, d, buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node that knows no leader says what it waits for. The case that was
// silent: a member of a cluster restarted with no --join, no Postgres and
// new ports (the bench's wide-keys group restarted one so, and it waited a
// minute for nobody) is told that nobody will look for it there and how to
// look for the cluster itself.
func TestNode_LeaderlessNodeSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	var first node.Config
	c := nodetest.New(t, 2, func(i int, cfg *node.Config) {
		if i == 0 {
			first = *cfg
		}
	})
	// Both stop; n1 comes back alone. (With n2 up, n1 dials n2's raft
	// address from its log, wins an election and never waits.)
	c.Close()

	var buf logBuffer
	cfg := first // its data dir, OS-chosen ports again, no --join
	cfg.Join = nil
	cfg.BootstrapExpect = 0
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	line := waitLog(t, &buf, 20*time.Second, "no leader known", "no --join addresses and no Postgres", "[n2]", "restart it with --join")
	t.Logf("restarted member: %s", line)

	// A new node with nothing to join names the same remedy, without a
	// cluster it was in.
	var fresh logBuffer
	lone, err := node.New(node.Config{
		NodeID: "lone", DataDir: filepath.Join(t.TempDir(), "lone"),
		BindAddr: "127.0.0.1:0", GossipBindAddr: "127.0.0.1:0",
		Timing: node.FastTiming(),
		Logger: slog.New(slog.NewTextHandler(&fresh, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	line = waitLog(t, &fresh, 20*time.Second, "no leader known", "no --join addresses and no Postgres")
	if strings.Contains(line, "cluster it was in") {
		t.Errorf("a new node is told of a cluster it was in: %s", line)
	}
}
