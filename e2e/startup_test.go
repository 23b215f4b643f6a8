package e2e

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every operator mistake at start makes the agent exit non-zero with a line
// naming the problem, never a panic or a goroutine dump.
func TestE2E_StartupErrors(t *testing.T) {
	t.Parallel()
	const password = "pw-0f-the-db"
	// held listens on a free loopback port until the test ends: a port
	// that is taken.
	held := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	file := func(t *testing.T, name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		// args returns the flags that make the mistake, given the agent's
		// data dir; they are added after the defaults and win over them.
		args func(t *testing.T, dataDir string) []string
		want []string // substrings of stderr
	}{
		{"http port taken", func(t *testing.T, _ string) []string {
			return []string{"--http", held(t)}
		}, []string{"raftpace: agent: --http: listen tcp", "address already in use"}},
		{"bind port taken", func(t *testing.T, _ string) []string {
			return []string{"--bind", held(t)}
		}, []string{"raftpace: agent: starting node: transport: listen on BindAddr", "address already in use"}},
		{"gossip port taken", func(t *testing.T, _ string) []string {
			return []string{"--gossip-bind", held(t)}
		}, []string{"raftpace: agent: starting node: gossip:", "address already in use"}},
		{"ready-file dir missing", func(t *testing.T, _ string) []string {
			return []string{"--ready-file", filepath.Join(t.TempDir(), "no", "such", "ready.json")}
		}, []string{"raftpace: agent: --ready-file:", "no such file or directory"}},
		{"timeline unwritable", func(t *testing.T, _ string) []string {
			return []string{"--load", "k", "--timeline", filepath.Join(file(t, "f", "x"), "n1.timeline")}
		}, []string{"raftpace: agent: --timeline:", "not a directory"}},
		{"data dir under a file", func(t *testing.T, _ string) []string {
			return []string{"--data-dir", filepath.Join(file(t, "f", "x"), "data")}
		}, []string{"raftpace: agent: starting node: DataDir:", "not a directory"}},
		{"data dir in use", func(t *testing.T, dataDir string) []string {
			// Hold raft.db's lock as a running agent would.
			if err := os.MkdirAll(dataDir, 0o750); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(filepath.Join(dataDir, "raft.db"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"raftpace: agent: starting node: raft store", "locked by another process", "another node running on DataDir"}},
		{"TLS files missing", func(t *testing.T, _ string) []string {
			dir := t.TempDir()
			return []string{"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "n.pem"), "--tls-key", filepath.Join(dir, "n.key")}
		}, []string{"raftpace: agent: invalid configuration:", "TLS: CA file", "no such file or directory"}},
		{"TLS files garbage", func(t *testing.T, _ string) []string {
			return []string{"--tls-ca", file(t, "ca.pem", "junk"), "--tls-cert", file(t, "n.pem", "junk"), "--tls-key", file(t, "n.key", "junk")}
		}, []string{"raftpace: agent: invalid configuration:", "TLS: CA file", "no PEM CERTIFICATE block"}},
		{"gossip key garbage", func(t *testing.T, _ string) []string {
			return []string{"--gossip-key-file", file(t, "gossip.key", "junk!")}
		}, []string{"raftpace: agent: invalid configuration:", "--gossip-key-file", "base64"}},
		{"postgres URL unparseable", func(t *testing.T, _ string) []string {
			return []string{"--postgres", "postgres://raftpace:" + password + "@db.example:54x2/raftpace"}
		}, []string{"raftpace: agent: invalid configuration:", "--postgres: cannot parse: invalid port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dataDir := filepath.Join(t.TempDir(), "data")
			args := []string{"agent", "--node-id", "s1", "--data-dir", dataDir,
				"--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0", "--http", "127.0.0.1:0",
				"--raft-timing", "fast", "--bootstrap-expect", "1"}
			args = append(args, tc.args(t, dataDir)...)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, args...)
			cmd.Env = cleanEnv()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			begin := time.Now()
			err := cmd.Run()
			out := stderr.String()
			var exit *exec.ExitError
			switch {
			case ctx.Err() != nil:
				t.Fatalf("agent still running after %v; stderr:\n%s", time.Since(begin), out)
			case err == nil:
				t.Fatalf("agent exited 0; stderr:\n%s", out)
			case !errors.As(err, &exit):
				t.Fatal(err)
			case exit.ExitCode() == 0 || exit.ExitCode() == -1:
				t.Fatalf("agent: %v; stderr:\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, out)
				}
			}
			for _, bad := range []string{"panic", "goroutine ", password} {
				if strings.Contains(out, bad) {
					t.Errorf("stderr contains %q:\n%s", bad, out)
				}
			}
			t.Logf("exit %d after %v: %s", exit.ExitCode(), time.Since(begin).Round(time.Millisecond), lastLines(out))
		})
	}
}

// lastLines returns the error the agent printed last: from the final line
// that starts with "raftpace", to the end.
func lastLines(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndex(s, "\nraftpace"); i >= 0 {
		return s[i+1:]
	}
	return s
}
