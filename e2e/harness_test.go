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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// binary is the raftpace executable built for this test run.
var binary string

// TestMain builds the binary (or, when RAFTPACE_E2E_BINARY names one,
// uses that: for iterating on the tests against a fixed build), runs the
// tests and prints the chaos suite's summary table.
func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" {
		os.Exit(partitionProbe())
	}
	dir, err := os.MkdirTemp("", "raftpace-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if prebuilt := os.Getenv("RAFTPACE_E2E_BINARY"); prebuilt != "" {
		if binary, err = filepath.Abs(prebuilt); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: RAFTPACE_E2E_BINARY:", err)
			os.Exit(1)
		}
	} else {
		binary = filepath.Join(dir, "raftpace")
		build := exec.Command("go", "build", "-o", binary, "./cmd/raftpace")
		build.Dir = ".."
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: building raftpace:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	printChaosSummary(os.Stdout)
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
	netns    string   // network namespace the agent and its CLI run in; "" is the host's
	args     []string // extra flags, kept across restarts
	addrs    ready    // fixed after the first start (or preset): restarts reuse them
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
}

// cluster is a set of agent processes.
type cluster struct {
	t      *testing.T
	dir    string
	netns  string // see agent.netns
	agents []*agent
}

// newAgent adds an agent (not started) with its files in c.dir.
func (c *cluster) newAgent(id string, args []string) *agent {
	a := &agent{
		t:        c.t,
		id:       id,
		dataDir:  filepath.Join(c.dir, id, "data"),
		timeline: filepath.Join(c.dir, id+".timeline"),
		logPath:  filepath.Join(c.dir, id+".log"),
		netns:    c.netns,
		args:     args,
	}
	c.agents = append(c.agents, a)
	return a
}

// agent returns the agent with the given id, or nil.
func (c *cluster) agent(id string) *agent {
	for _, a := range c.agents {
		if a.id == id {
			return a
		}
	}
	return nil
}

// agentOpts configure the agents of a cluster.
type agentOpts struct {
	loads    []string // --load values
	loadMode string   // raft (default) or solo
	extra    []string
	perAgent func(a *agent) []string // more flags, per agent (e.g. its own --socket)
}

// startCluster starts size agents that bootstrap one cluster and waits until
// each reports the same leader.
func startCluster(t *testing.T, size int, o agentOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: keptDir(t)} // agent logs kept when the test fails
	for i := 0; i < size; i++ {
		a := c.newAgent(fmt.Sprintf("n%d", i+1), nil)
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
		if o.perAgent != nil {
			a.args = append(a.args, o.perAgent(a)...)
		}
		var join []string
		if i > 0 {
			join = []string{c.agents[0].addrs.GossipAddr}
		}
		a.start(join)
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
	cmd := a.command(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
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
			// In a namespace the process is `ip netns exec NS raftpace`,
			// which execs the agent in place: the PID we signal must be
			// the agent's own.
			if r.PID != 0 && r.PID != cmd.Process.Pid {
				a.t.Fatalf("%s: agent reports pid %d, the test started pid %d: signals would miss it", a.id, r.PID, cmd.Process.Pid)
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

// command returns the raftpace binary with args, run inside the agent's
// network namespace if it has one.
func (a *agent) command(ctx context.Context, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if a.netns != "" {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", a.netns, binary}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, binary, args...)
	}
	cmd.Env = cleanEnv()
	return cmd
}

// cleanEnv drops RAFTPACE_* variables of the developer's shell.
// quitForStacks ends a process that hangs: SIGQUIT first, so that the Go
// runtime writes every goroutine's stack to its stderr (the agent's log;
// GOTRACEBACK=all from cleanEnv), then SIGKILL if it is still there 5 s
// later. done is closed when the process has exited.
func quitForStacks(p *os.Process, done <-chan struct{}) {
	p.Signal(syscall.SIGQUIT)
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	p.Kill()
	<-done
}

// cleanEnv is the test's environment for an agent: no RAFTPACE_ variable
// (the flags say everything), and GOTRACEBACK=all so that a hang ended by
// quitForStacks shows every goroutine.
func cleanEnv() []string {
	env := []string{"GOTRACEBACK=all"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTPACE_") && !strings.HasPrefix(kv, "GOTRACEBACK=") {
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
	a.cmd.Process.Signal(syscall.SIGCONT) // in case a test paused it
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		if a.exitErr != nil {
			a.t.Errorf("%s exited with %v after SIGTERM; log:\n%s", a.id, a.exitErr, a.tail())
		}
	case <-time.After(15 * time.Second):
		quitForStacks(a.cmd.Process, a.done)
		a.t.Errorf("%s did not exit within 15s of SIGTERM; its goroutines (SIGQUIT) are at the end of %s", a.id, a.logPath)
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
	cmd := a.command(ctx, full...)
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

// statusDoc is what `raftpace status --json` prints (node/report's Status), in part.
type statusDoc struct {
	ID           string         `json:"id"`
	State        string         `json:"state"`
	Leader       string         `json:"leader"`
	Granting     bool           `json:"granting"`
	Mode         string         `json:"mode"`
	Fraction     float64        `json:"fraction"`
	HeldFraction float64        `json:"held_fraction"`
	Members      []memberStatus `json:"members"`
	Limits       []limitStatus  `json:"limits"`
	Stats        map[string]int `json:"stats"`
}

type limitStatus struct {
	Key       string        `json:"key"`
	HorizonIn time.Duration `json:"horizon_in_ns"` // leader only
	Backlog   time.Duration `json:"backlog_ns"`    // leader only: TAT - now
}

type memberStatus struct {
	ID        string  `json:"id"`
	Role      string  `json:"role"`
	Health    string  `json:"health"`
	Fraction  float64 `json:"fraction"`
	ShareHeld bool    `json:"share_held"`
	Leader    bool    `json:"leader"`
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

// series is one key's admitted events in time order (unix nanoseconds):
// the admitted rate over any interval, for utilisation and recovery.
type series []int64

func keySeries(evs []timeline.Event, key string) series {
	var s series
	for _, e := range evs {
		if e.Key == key {
			s = append(s, e.At)
		}
	}
	slices.Sort(s)
	return s
}

// prefixSeries is the events of every key starting with prefix, merged
// in time order: several keys' rate together.
func prefixSeries(evs []timeline.Event, prefix string) series {
	var s series
	for _, e := range evs {
		if strings.HasPrefix(e.Key, prefix) {
			s = append(s, e.At)
		}
	}
	slices.Sort(s)
	return s
}

// count is the number of events in [from, to).
func (s series) count(from, to time.Time) int {
	lo, _ := slices.BinarySearch(s, from.UnixNano())
	hi, _ := slices.BinarySearch(s, to.UnixNano())
	return max(0, hi-lo)
}

// rate is the admitted rate in events per second between from and to.
func (s series) rate(from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	return float64(s.count(from, to)) / to.Sub(from).Seconds()
}
