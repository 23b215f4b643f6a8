package node_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
)

// freeAddr returns a loopback address whose port, TCP and UDP, was free a
// moment ago. The port is below the kernel's ephemeral range: a port from
// it (what listening on :0 gives) may be taken meanwhile as the source
// port of any connection another process on the machine opens (a CI run
// tests packages side by side), and a test that binds the same port twice
// would then fail for a reason that is not its own.
func freeAddr(t *testing.T) string {
	t.Helper()
	lo := ephemeralLow()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(lo-10000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr
	}
	t.Fatalf("no free port below %d", lo)
	return ""
}

// ephemeralLow is the lowest port the kernel hands out as a source port
// (Linux: ip_local_port_range; elsewhere the IANA range's start).
func ephemeralLow() int {
	lo := 49152
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
			lo = 32768
		}
	}
	return max(lo, 10001)
}

// holdPort listens on a free loopback port until the test ends and returns
// its address: a port that is taken.
func holdPort(t *testing.T) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), ln
}

// tryNew calls node.New and turns a panic into a test failure.
func tryNew(t *testing.T, cfg node.Config) (n *node.Node, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("node.New panicked: %v", p)
		}
	}()
	return node.New(cfg)
}

func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNew_StartupErrors: every way New can fail returns one error naming
// the problem (no panic), and releases what it had opened: New then
// succeeds on the same addresses and data dir once the problem is fixed.
func TestNew_StartupErrors(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-Pa55"
	tests := []struct {
		name string
		// setup breaks cfg; the returned fix (may be nil) repairs it.
		setup   func(t *testing.T, cfg *node.Config) (fix func(*node.Config))
		want    []string // substrings of the error
		invalid bool     // the error wraps ErrInvalidConfig
	}{
		{
			name: "bind port taken",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				addr, ln := holdPort(t)
				cfg.BindAddr = addr
				return func(*node.Config) { ln.Close() }
			},
			want: []string{"BindAddr", "address already in use"},
		},
		{
			name: "gossip port taken",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				addr, ln := holdPort(t)
				cfg.GossipBindAddr = addr
				return func(*node.Config) { ln.Close() }
			},
			want: []string{"node: gossip", "address already in use"},
		},
		{
			name: "data dir under a regular file",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				file := writeTestFile(t, t.TempDir(), "file", "x")
				good := cfg.DataDir
				cfg.DataDir = filepath.Join(file, "data")
				return func(c *node.Config) { c.DataDir = good }
			},
			want: []string{"node: DataDir", "not a directory"},
		},
		{
			name: "data dir not writable",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				// Tests run as root, who may write anywhere but /proc.
				good := cfg.DataDir
				cfg.DataDir = "/proc/self/raftpace-data"
				return func(c *node.Config) { c.DataDir = good }
			},
			want: []string{"node: DataDir", "/proc/self/raftpace-data"},
		},
		{
			name: "raft.db is a directory",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				db := filepath.Join(cfg.DataDir, "raft.db")
				if err := os.MkdirAll(db, 0o750); err != nil {
					t.Fatal(err)
				}
				return func(*node.Config) { os.Remove(db) }
			},
			want: []string{"node: raft store", "raft.db", "is a directory"},
		},
		{
			name: "snapshots is a file",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
					t.Fatal(err)
				}
				p := writeTestFile(t, cfg.DataDir, "snapshots", "x")
				return func(*node.Config) { os.Remove(p) }
			},
			want: []string{"node: snapshot store", "snapshots"},
		},
		{
			name: "data dir used by a running node",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				other := *cfg
				other.BindAddr, other.GossipBindAddr = "127.0.0.1:0", "127.0.0.1:0"
				running, err := node.New(other)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { running.Close() })
				return func(*node.Config) { running.Close() }
			},
			want: []string{"node: raft store", "locked by another process", "another node running on DataDir"},
		},
		{
			name: "data dir of another node id",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				other := *cfg
				other.NodeID = "someone-else"
				other.BindAddr, other.GossipBindAddr = "127.0.0.1:0", "127.0.0.1:0"
				n, err := node.New(other)
				if err != nil {
					t.Fatal(err)
				}
				n.Close()
				good := cfg.DataDir
				return func(c *node.Config) { c.DataDir = good + "-own" }
			},
			want:    []string{"node: ", "DataDir", `node "someone-else"'s raft state`, "its own data dir"},
			invalid: true,
		},
		{
			name: "TLS files missing",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				dir := t.TempDir()
				cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "n.pem"), filepath.Join(dir, "n.key")
				return func(c *node.Config) { c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = "", "", "" }
			},
			want:    []string{"TLS", "ca.pem", "no such file"},
			invalid: true,
		},
		{
			name: "TLS files garbage",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				dir := t.TempDir()
				cfg.TLSCAFile = writeTestFile(t, dir, "ca.pem", "garbage")
				cfg.TLSCertFile = writeTestFile(t, dir, "n.pem", "garbage")
				cfg.TLSKeyFile = writeTestFile(t, dir, "n.key", "garbage")
				return func(c *node.Config) { c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = "", "", "" }
			},
			want:    []string{"TLS"},
			invalid: true,
		},
		{
			name: "TLS files incomplete",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.TLSCertFile = writeTestFile(t, t.TempDir(), "n.pem", "garbage")
				return func(c *node.Config) { c.TLSCertFile = "" }
			},
			want:    []string{"must be given together", "TLSCAFile, TLSKeyFile missing"},
			invalid: true,
		},
		{
			name: "gossip key file missing",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.GossipKeyFile = filepath.Join(t.TempDir(), "gossip.key")
				return func(c *node.Config) { c.GossipKeyFile = "" }
			},
			want:    []string{"GossipKeyFile", "no such file"},
			invalid: true,
		},
		{
			name: "gossip key file garbage",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.GossipKeyFile = writeTestFile(t, t.TempDir(), "gossip.key", "not base64!")
				return func(c *node.Config) { c.GossipKeyFile = "" }
			},
			want:    []string{"GossipKeyFile", "base64"},
			invalid: true,
		},
		{
			name: "gossip key wrong length",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.GossipKeyFile = writeTestFile(t, t.TempDir(), "gossip.key", "c2hvcnQ=")
				return func(c *node.Config) { c.GossipKeyFile = "" }
			},
			want:    []string{"GossipKeyFile", "the key is 5 bytes"},
			invalid: true,
		},
		{
			name: "postgres URL bad port",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.PostgresURL = "postgres://rp:" + password + "@db.example:port/rp"
				return func(c *node.Config) { c.PostgresURL = "" }
			},
			want:    []string{"PostgresURL: cannot parse: invalid port"},
			invalid: true,
		},
		{
			name: "postgres URL bad escape in password",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.PostgresURL = "postgres://rp:" + password + "%zz@db.example/rp"
				return func(c *node.Config) { c.PostgresURL = "" }
			},
			want:    []string{"PostgresURL: cannot parse:", "percent-encoded"},
			invalid: true,
		},
		{
			name: "postgres keyword string unterminated",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.PostgresURL = "host=db.example password='" + password + " dbname=rp"
				return func(c *node.Config) { c.PostgresURL = "" }
			},
			want:    []string{"PostgresURL: cannot parse:", "unterminated quoted string"},
			invalid: true,
		},
		{
			name: "postgres URL bad pool setting",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.PostgresURL = "postgres://rp:" + password + "@db.example/rp?pool_max_conns=" + password
				return func(c *node.Config) { c.PostgresURL = "" }
			},
			want:    []string{"PostgresURL: cannot parse: cannot parse pool_max_conns"},
			invalid: true,
		},
		{
			name: "cluster name too long",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.ClusterName = strings.Repeat("c", 256)
				return func(c *node.Config) { c.ClusterName = "" }
			},
			want:    []string{"ClusterName", "at most 255 bytes"},
			invalid: true,
		},
		{
			name: "gossip advertise host name",
			setup: func(t *testing.T, cfg *node.Config) func(*node.Config) {
				cfg.GossipAdvertiseAddr = "node1.example:7401"
				return func(c *node.Config) { c.GossipAdvertiseAddr = "" }
			},
			want:    []string{"GossipAdvertiseAddr", "must be an IP address"},
			invalid: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := node.Config{
				NodeID:         "s1",
				DataDir:        filepath.Join(t.TempDir(), "data"),
				BindAddr:       freeAddr(t),
				GossipBindAddr: freeAddr(t),
				Timing:         node.FastTiming(),
			}
			fix := tc.setup(t, &cfg)
			begin := time.Now()
			n, err := tryNew(t, cfg)
			if err == nil {
				n.Close()
				t.Fatal("New succeeded")
			}
			if took := time.Since(begin); took > 10*time.Second {
				t.Errorf("New took %v to fail", took)
			}
			msg := err.Error()
			t.Logf("New: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, password) {
				t.Errorf("error %q shows the password", msg)
			}
			if got := errors.Is(err, node.ErrInvalidConfig); got != tc.invalid {
				t.Errorf("errors.Is(%q, ErrInvalidConfig) = %v, want %v", msg, got, tc.invalid)
			}
			if strings.Count(msg, "\n") > 0 {
				t.Errorf("error is not one line: %q", msg)
			}

			// Whatever the failed New opened is released: fixed, the same
			// config starts on the same ports and data dir.
			if fix != nil {
				fix(&cfg)
			}
			n, err = tryNew(t, cfg)
			if err != nil {
				t.Fatalf("New after fixing %s: %v", tc.name, err)
			}
			if err := n.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestNew_FailedStartReleasesEverything: a New that fails late (gossip,
// after the transport, the raft store and raft are up) leaves nothing
// behind, many times over.
func TestNew_FailedStartReleasesEverything(t *testing.T) {
	t.Parallel()
	gossip, ln := holdPort(t)
	cfg := node.Config{
		NodeID:          "r1",
		DataDir:         t.TempDir(),
		BindAddr:        freeAddr(t),
		GossipBindAddr:  gossip,
		BootstrapExpect: 1,
		Timing:          node.FastTiming(),
	}
	for i := range 5 {
		if _, err := tryNew(t, cfg); err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("attempt %d: got %v, want gossip's address in use", i, err)
		}
	}
	ln.Close()
	n, err := tryNew(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := n.Addr(); got != cfg.BindAddr {
		t.Errorf("Addr() = %s, want %s", got, cfg.BindAddr)
	}
	if got := n.GossipAddr(); got != gossip {
		t.Errorf("GossipAddr() = %s, want %s", got, gossip)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(fmt.Errorf("single node after failed starts: %w", err))
	}
}
