package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/agent"
	"github.com/raftpace/raftpace/internal/timeline"
)

// buildBinary builds this command into a temporary directory: the tests
// below run the real binary, as an operator would.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "raftpace")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBinary runs the built binary with args and no RAFTPACE_* variable of
// the test's, and returns what it printed and its exit status.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// binAgent is a running agent process.
type binAgent struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	info   agent.ReadyInfo
	done   chan error
}

// startBinAgent starts the binary as a one-node agent on free ports with
// extra flags; ready false returns as soon as it exits (a start-up error).
func startBinAgent(t *testing.T, bin, dir string, extra ...string) *binAgent {
	t.Helper()
	ready := filepath.Join(dir, "ready.json")
	args := append([]string{"agent", "--node-id", "s1", "--data-dir", filepath.Join(dir, "data"),
		"--bind", "127.0.0.1:0", "--gossip-bind", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--bootstrap-expect", "1", "--raft-timing", "fast", "--ready-file", ready}, extra...)
	a := &binAgent{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	a.cmd.Stderr = a.stderr
	// Under a strict umask the socket must still be 0660. The child
	// inherits the umask at fork; these tests are not parallel.
	old := syscall.Umask(0o077)
	err := a.cmd.Start()
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			a.cmd.Process.Kill()
			<-a.done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &a.info) == nil {
			return a
		}
		select {
		case err := <-a.done:
			a.done <- err
			return a
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("agent not ready after 30s:\n%s", a.stderr)
	return nil
}

// exited waits for the agent's exit and returns its code.
func (a *binAgent) exited(t *testing.T) int {
	t.Helper()
	select {
	case <-a.done:
		return a.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not exit:\n%s", a.stderr)
		return -1
	}
}

// unixClient talks HTTP over the unix socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 64,
	}}
}

func send(t *testing.T, c *http.Client, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func TestAgentSocket_Binary(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")

	// A stale socket: its listener closed without removing the file.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if st, err := os.Lstat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("stale socket not left: %v", err)
	}

	a := startBinAgent(t, bin, filepath.Join(dir, "a"), "--socket", sock)
	if a.info.Socket != sock {
		t.Fatalf("agent not ready (ready file %+v):\n%s", a.info, a.stderr)
	}
	st, err := os.Lstat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v: mode %v, want a socket 0660", err, st.Mode())
	}

	// The admin API on --http sets the limit; the socket reads it but
	// serves no admin route.
	hc := &http.Client{}
	if code, m := send(t, hc, "PUT", "http://"+a.info.HTTPAddr+"/v1/limits/k", `{"rate":50,"burst":5}`); code != 200 {
		t.Fatalf("set limit: %d %v", code, m)
	}
	send(t, hc, "PUT", "http://"+a.info.HTTPAddr+"/v1/limits/twin", `{"rate":50,"burst":5}`)
	uc := unixClient(sock)
	if code, m := send(t, uc, "GET", "http://agent/v1/limits/k", ""); code != 200 || m["rate"] != 50.0 || m["burst"] != 5.0 {
		t.Fatalf("GET /v1/limits/k on the socket: %d %v", code, m)
	}
	for _, p := range []string{"/v1/status", "/v1/limits", "/metrics"} {
		if code, _ := send(t, uc, "GET", "http://agent"+p, ""); code != 404 {
			t.Errorf("GET %s on the socket: %d, want 404 (not served there)", p, code)
		}
	}
	if code, m := send(t, hc, "POST", "http://"+a.info.HTTPAddr+"/v1/reserve/k", `{"max_wait":1}`); code != 200 {
		t.Errorf("reserve on --http: %d %v", code, m)
	}

	// The operator's pause (the admin client, through the data plane's
	// route on --http) still pauses a key without a limit; the socket sees it.
	if out, err := exec.Command(bin, "pause", "nolimit", "--for", "5s", "--addr", a.info.HTTPAddr).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "nolimit: paused for") {
		t.Errorf("raftpace pause: %v: %s", err, out)
	}
	if code, m := send(t, uc, "GET", "http://agent/v1/pauses/nolimit", ""); code != 200 || m["remaining_s"].(float64) < 3 {
		t.Errorf("GET /v1/pauses/nolimit on the socket: %d %v", code, m)
	}

	// Another agent on the same socket: a start-up error naming it.
	b := startBinAgent(t, bin, filepath.Join(dir, "b"), "--socket", sock)
	if code := b.exited(t); code == 0 || !strings.Contains(b.stderr.String(), "--socket") ||
		!strings.Contains(b.stderr.String(), sock) || !strings.Contains(b.stderr.String(), "answers on this socket") {
		t.Errorf("second agent on a live socket: exit %d:\n%s", code, b.stderr)
	}
	// A file that is no socket.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("x"), 0o644)
	c := startBinAgent(t, bin, filepath.Join(dir, "c"), "--socket", plain)
	if code := c.exited(t); code == 0 || !strings.Contains(c.stderr.String(), `--socket "`+plain+`"`) ||
		!strings.Contains(c.stderr.String(), "not a socket") {
		t.Errorf("agent on a plain file: exit %d:\n%s", code, c.stderr)
	}
	if b, _ := os.ReadFile(plain); string(b) != "x" {
		t.Errorf("the plain file was touched: %q", b)
	}

	t.Run("ceiling", func(t *testing.T) {
		honest := reserveThroughSocket(t, uc, "k", 3*time.Second, false)
		if !honest.OK() {
			t.Errorf("callers that keep the rule broke the ceiling:\n%s", honest)
		}
		if honest.Events < 100 {
			t.Errorf("only %d events in 3s at 50/s", honest.Events)
		}
		t.Logf("honest callers:\n%s", honest)
		twin := reserveThroughSocket(t, uc, "twin", time.Second, true)
		t.Logf("callers going at recv:\n%s", twin)
		if twin.OK() {
			t.Errorf("callers that ignore wait kept the ceiling: the check cannot fail\n%s", twin)
		}
	})

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := a.exited(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, a.stderr)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
}

// reserveThroughSocket runs 4 callers reserving key through the socket for
// d, each placing its grants on its own clock by docs/dataplane.md's rule
// (goAtRecv: going at once, ignoring wait), and checks the merged events
// against R*W + B + R*delta with delta the agent's default --use-grace.
func reserveThroughSocket(t *testing.T, c *http.Client, key string, d time.Duration, goAtRecv bool) timeline.KeyReport {
	var mu sync.Mutex
	var events []timeline.Event
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("caller%d", g)
			for time.Now().Before(end) {
				sent := time.Now()
				code, m := send(t, c, "POST", "http://agent/v1/reserve/"+key, `{"max_wait":2}`)
				recv := time.Now()
				if code != 200 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				secs := func(f string) time.Duration { return time.Duration(m[f].(float64) * 1e9) }
				at := recv.Add(secs("wait"))
				if goAtRecv {
					at = recv
				}
				time.Sleep(time.Until(at))
				if time.Now().After(sent.Add(secs("held") + secs("use_by"))) {
					send(t, c, "POST", "http://agent/v1/forfeit/"+key, ``)
					continue
				}
				mu.Lock()
				events = append(events, timeline.Event{At: time.Now().UnixNano(), Node: node, Key: key})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return timeline.Check(events, key, timeline.Spec{Limit: timeline.Limit{Rate: 50, Burst: 5}, Delta: 50 * time.Millisecond})
}

// A bad --socket is a start-up error naming the flag and the path, before
// the node starts.
func TestAgentSocket_BadPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing", "a.sock"), "its directory"},
		{dir, "is a directory"},
		{filepath.Join(dir, strings.Repeat("x", 120)), "longer than"},
	} {
		r := runCLI(t.Context(), nil, "agent", "--data-dir", filepath.Join(dir, "data"), "--socket", c.path)
		if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("--socket %q", c.path)) || !strings.Contains(r.stderr, c.want) {
			t.Errorf("--socket %s: exit %d:\n%s", c.path, r.code, r.stderr)
		}
	}
	r := runCLI(t.Context(), map[string]string{"RAFTPACE_SOCKET": dir}, "agent", "--data-dir", filepath.Join(dir, "data"))
	if r.code == 0 || !strings.Contains(r.stderr, "--socket") {
		t.Errorf("RAFTPACE_SOCKET=%s: exit %d:\n%s", dir, r.code, r.stderr)
	}
}
