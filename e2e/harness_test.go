// Package e2e runs real OS processes of the raftpace binary on loopback and
// checks what they admit. These are the tests users believe: the binary is
// built once per run (TestMain), agents are started, stopped, killed and
// restarted as processes, and the ceiling is checked on the merged timelines
// they write.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// binary is the raftpace executable built for this test run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftpace-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "raftpace")
	build := exec.Command("go", "build", "-o", binary, "./cmd/raftpace")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building raftpace:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ready is what an agent writes to its --ready-file.
type ready struct {
	NodeID     string `json:"node_id"`
	Addr       string `json:"addr"`
	GossipAddr string `json:"gossip_addr"`
	HTTPAddr   string `json:"http_addr"`
	PID        int    `json:"pid"`
}

// agent is one raftpace agent process.
type agent struct {
	t        *testing.T
	id       string
	dataDir  string
	timeline string
	logPath  string
	args     []string // extra flags, kept across restarts
	addrs    ready    // fixed after the first start: restarts reuse them
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
}

// cluster is a set of agent processes.
type cluster struct {
	t      *testing.T
	dir    string
	agents []*agent
}

// agentOpts configure the agents of a cluster.
type agentOpts struct {
	loads    []string // --load values
	loadMode string   // raft (default) or solo
	extra    []string
}

// startCluster starts size agents that bootstrap one cluster and waits until
// each reports the same leader.
func startCluster(t *testing.T, size int, o agentOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	for i := 0; i < size; i++ {
		id := fmt.Sprintf("n%d", i+1)
		a := &agent{
			t:        t,
			id:       id,
			dataDir:  filepath.Join(c.dir, id, "data"),
			timeline: filepath.Join(c.dir, id+".timeline"),
			logPath:  filepath.Join(c.dir, id+".log"),
		}
		a.args = []string{"--bootstrap-expect", fmt.Sprint(size), "--log-format", "json", "--log-level", "debug"}
		for _, l := range o.loads {
			a.args = append(a.args, "--load", l)
		}
		if len(o.loads) > 0 {
			a.args = append(a.args, "--timeline", a.timeline)
		}
		if o.loadMode != "" {
			a.args = append(a.args, "--load-mode", o.loadMode)
		}
		a.args = append(a.args, o.extra...)
		var join []string
		if i > 0 {
			join = []string{c.agents[0].addrs.GossipAddr}
		}
		a.start(join)
		c.agents = append(c.agents, a)
	}
	t.Cleanup(c.stopAll)
	c.waitLeader(30 * time.Second)
	return c
}

func (a *agent) start(join []string) {
	a.t.Helper()
	bind, gossip, httpAddr := "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if a.addrs.Addr != "" {
		bind, gossip, httpAddr = a.addrs.Addr, a.addrs.GossipAddr, a.addrs.HTTPAddr
	}
	readyFile := filepath.Join(filepath.Dir(a.dataDir), "ready.json")
	os.Remove(readyFile)
	args := []string{"agent",
		"--node-id", a.id, "--data-dir", a.dataDir,
		"--bind", bind, "--gossip-bind", gossip, "--http", httpAddr,
		"--ready-file", readyFile,
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	args = append(args, a.args...)
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		a.t.Fatalf("start %s: %v", a.id, err)
	}
	a.cmd = cmd
	a.done = make(chan struct{})
	go func() {
		a.exitErr = cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	// Wait for the ready file (actual addresses, ports chosen by the OS).
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(readyFile)
		if err == nil {
			var r ready
			if err := json.Unmarshal(b, &r); err != nil {
				a.t.Fatalf("%s: ready file: %v", a.id, err)
			}
			a.addrs = r
			return
		}
		select {
		case <-a.done:
			a.t.Fatalf("%s exited before it was ready (%v); log:\n%s", a.id, a.exitErr, a.tail())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s not ready within 20s; log:\n%s", a.id, a.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanEnv drops RAFTPACE_* variables of the developer's shell.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTPACE_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail returns the end of the agent's log, for failure messages.
func (a *agent) tail() string {
	b, _ := os.ReadFile(a.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (a *agent) running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (a *agent) stop() {
	a.t.Helper()
	if !a.running() {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		if a.exitErr != nil {
			a.t.Errorf("%s exited with %v after SIGTERM; log:\n%s", a.id, a.exitErr, a.tail())
		}
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
		a.t.Errorf("%s did not exit within 15s of SIGTERM", a.id)
	}
}

// kill sends SIGKILL: a crash.
func (a *agent) kill() {
	if !a.running() {
		return
	}
	a.cmd.Process.Kill()
	<-a.done
}

// restart starts the agent again on its data dir and addresses.
func (c *cluster) restart(a *agent) {
	c.t.Helper()
	var join []string
	for _, o := range c.agents {
		if o != a {
			join = append(join, o.addrs.GossipAddr)
		}
	}
	a.start(join)
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, a := range c.agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.stop() }()
	}
	wg.Wait()
}

// cli runs a raftpace operator command against agent a and returns its
// combined output and exit code.
func (a *agent) cli(args ...string) (string, int) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{args[0], "--addr", a.addrs.HTTPAddr}, args[1:]...)
	cmd := exec.CommandContext(ctx, binary, full...)
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("raftpace %v: %v", args, err)
	}
	return out.String(), code
}

// mustCLI runs a command that must succeed.
func (a *agent) mustCLI(args ...string) string {
	a.t.Helper()
	out, code := a.cli(args...)
	if code != 0 {
		a.t.Fatalf("raftpace %v: exit %d:\n%s", args, code, out)
	}
	return out
}

type statusDoc struct {
	Leader  string `json:"leader"`
	Members []struct {
		ID     string `json:"id"`
		Role   string `json:"role"`
		Health string `json:"health"`
	} `json:"members"`
}

func (a *agent) status() (statusDoc, error) {
	out, code := a.cli("status", "--json")
	if code != 0 {
		return statusDoc{}, fmt.Errorf("status exit %d: %s", code, out)
	}
	var st statusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return statusDoc{}, fmt.Errorf("status json: %v: %s", err, out)
	}
	return st, nil
}

// waitLeader waits until every running agent names the same leader.
func (c *cluster) waitLeader(d time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		leader, agree := "", true
		for _, a := range c.agents {
			if !a.running() {
				continue
			}
			st, err := a.status()
			if err != nil || st.Leader == "" || (leader != "" && st.Leader != leader) {
				agree = false
				last = fmt.Sprintf("%s: %+v %v", a.id, st, err)
				break
			}
			leader = st.Leader
		}
		if agree && leader != "" {
			return leader
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("agents did not agree on a leader within %v (last: %s)", d, last)
	return ""
}

// events merges the timelines of every agent.
func (c *cluster) events() []timeline.Event {
	c.t.Helper()
	var paths []string
	for _, a := range c.agents {
		if _, err := os.Stat(a.timeline); err == nil {
			paths = append(paths, a.timeline)
		}
	}
	evs, err := timeline.ParseFiles(paths...)
	if err != nil {
		c.t.Fatalf("timelines: %v", err)
	}
	return evs
}

// useGrace is the agents' default node.Config.UseGrace: the delta of the
// ceiling R*W + B + R*delta.
const useGrace = 50 * time.Millisecond

func windows() []time.Duration {
	return []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}
}
