package e2e

// Helpers for the tests of workers in other languages (python_test.go,
// ruby_test.go, shared_limit_test.go): agents serving their data plane on
// a unix socket, worker processes (testdata/pyworker.py, rbworker.rb)
// that write their own timelines, and `raftpace check` run on the merged
// files.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// lang is a language whose workers the tests run: an interpreter found on
// PATH runs its worker script (testdata) with its client (clients/).
type lang struct {
	name   string // in messages: Python, Ruby
	prefix string // of worker names and keys: py, rb
	prog   string // the interpreter (and its Debian package)
	script string // in testdata: same flags, modes and output for every language
	client string // in clients
	path   string // the interpreter's path, set by needLang
	// argv and env run script with the client at clientDir importable.
	argv func(script, clientDir string) []string
	env  func(clientDir string) []string
}

var (
	python = lang{name: "Python", prefix: "py", prog: "python3", script: "pyworker.py", client: "python",
		argv: func(script, _ string) []string { return []string{"-u", script} },
		env: func(clientDir string) []string {
			return []string{"PYTHONPATH=" + clientDir, "PYTHONDONTWRITEBYTECODE=1"}
		}}
	ruby = lang{name: "Ruby", prefix: "rb", prog: "ruby", script: "rbworker.rb", client: "ruby",
		argv: func(script, clientDir string) []string {
			return []string{"-I", filepath.Join(clientDir, "lib"), script}
		},
		// RUBYOPT emptied: no -rbundler/setup or the like from outside.
		env: func(string) []string { return []string{"RUBYOPT="} }}
)

// needLang returns l with the path of its interpreter. Without it the test
// is skipped, or fails when CI is set (like chromium for the status page
// test).
func needLang(t *testing.T, l lang) lang {
	t.Helper()
	if p, err := exec.LookPath(l.prog); err == nil {
		l.path = p
		return l
	}
	msg := fmt.Sprintf("%s is not installed: the %s worker tests need it "+
		"(Debian: apt-get install %s; scripts/test.sh installs it as root)", l.prog, l.name, l.prog)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return l
}

// maxSocketPath is the longest unix socket path the agent accepts.
const maxSocketPath = 103

// withSocket is an agentOpts.perAgent that serves each agent's data plane
// on a socket in its own directory (c.dir/ID/agent.sock; a short temporary
// directory when TMPDIR makes that too long for a unix socket).
func withSocket(t *testing.T) func(a *agent) []string {
	return func(a *agent) []string {
		dir := filepath.Dir(a.dataDir)
		if len(filepath.Join(dir, "agent.sock")) > maxSocketPath {
			d, err := os.MkdirTemp("/tmp", "rp-"+a.id+"-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			dir = d
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return []string{"--socket", filepath.Join(dir, "agent.sock")}
	}
}

// socketOf returns the --socket an agent was started with.
func socketOf(a *agent) string {
	if i := slices.Index(a.args, "--socket"); i >= 0 && i+1 < len(a.args) {
		return a.args[i+1]
	}
	a.t.Fatalf("%s has no --socket", a.id)
	return ""
}

// workerOpts configure one run of a worker script (testdata/pyworker.py,
// rbworker.rb).
type workerOpts struct {
	name     string // the node id of its timeline lines
	socket   string // its agent's --socket ("" in solo mode)
	key      string
	mode     string // agent, solo or naive
	rate     float64
	burst    int
	startAt  time.Time // zero: at once (or see later)
	later    bool      // start when told (startTogether)
	duration time.Duration
	holdWait time.Duration // hold the first grant with at least this wait (see pyworker.py)
}

// worker is one worker process, in any language.
type worker struct {
	t        *testing.T
	name     string
	timeline string
	logPath  string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{}
	exitErr  error

	mu    sync.Mutex
	lines []string // its stdout
}

// startWorker starts a worker of language l (from needLang) with its
// files in dir.
func startWorker(t *testing.T, l lang, dir string, o workerOpts) *worker {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", l.script))
	if err != nil {
		t.Fatal(err)
	}
	clientDir, err := filepath.Abs(filepath.Join("..", "clients", l.client))
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, name: o.name, timeline: filepath.Join(dir, o.name+".timeline"),
		logPath: filepath.Join(dir, o.name+".stderr"), done: make(chan struct{})}
	args := append(l.argv(script, clientDir), "--key", o.key, "--node", o.name, "--timeline", w.timeline,
		"--mode", o.mode, "--duration", strconv.FormatFloat(o.duration.Seconds(), 'f', 3, 64))
	if o.socket != "" {
		args = append(args, "--socket", o.socket)
	}
	if o.rate > 0 {
		args = append(args, "--rate", fmt.Sprint(o.rate), "--burst", fmt.Sprint(o.burst))
	}
	if o.later {
		args = append(args, "--start-at", "-1")
	} else if !o.startAt.IsZero() {
		args = append(args, "--start-at", strconv.FormatFloat(float64(o.startAt.UnixNano())/1e9, 'f', 6, 64))
	}
	if o.holdWait > 0 {
		args = append(args, "--hold-wait", fmt.Sprint(o.holdWait.Seconds()))
	}
	cmd := exec.Command(l.path, args...)
	cmd.Env = append(cleanEnv(), l.env(clientDir)...)
	logf, err := os.Create(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", o.name, err)
	}
	w.cmd = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
		}
		w.exitErr = cmd.Wait()
		logf.Close()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-w.done
		}
	})
	return w
}

// startTogether waits until every worker (started with later) is READY
// and tells them all to start their loop shortly after; it returns that
// moment.
func startTogether(t *testing.T, ws []*worker) time.Time {
	t.Helper()
	for _, w := range ws {
		w.waitLine("READY", 30*time.Second)
	}
	at := time.Now().Add(200 * time.Millisecond)
	for _, w := range ws {
		if _, err := fmt.Fprintf(w.stdin, "%.6f\n", float64(at.UnixNano())/1e9); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
	}
	return at
}

// stdout returns the lines the worker printed so far.
func (w *worker) stdout() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

// waitLine waits for a line starting with prefix and returns it.
func (w *worker) waitLine(prefix string, d time.Duration) string {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, l := range w.stdout() {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		select {
		case <-w.done:
			w.t.Fatalf("%s exited (%v) before printing %q; stderr:\n%s", w.name, w.exitErr, prefix, w.stderr())
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s did not print %q within %v; stderr:\n%s", w.name, prefix, d, w.stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wait waits for the worker to exit by itself, successfully.
func (w *worker) wait(d time.Duration) {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(d):
		w.cmd.Process.Kill()
		<-w.done
		w.t.Fatalf("%s did not finish within %v; stderr:\n%s", w.name, d, w.stderr())
	}
	if w.exitErr != nil {
		w.t.Fatalf("%s: %v; stderr:\n%s", w.name, w.exitErr, w.stderr())
	}
}

// terminate ends a worker with SIGTERM (it exits 0) and waits for it.
func (w *worker) terminate() {
	w.t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	w.wait(10 * time.Second)
}

func (w *worker) stderr() string {
	b, _ := os.ReadFile(w.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// events parses the worker's timeline.
func (w *worker) events() []timeline.Event {
	w.t.Helper()
	evs, err := timeline.ParseFiles(w.timeline)
	if err != nil {
		w.t.Fatalf("%s: %v", w.name, err)
	}
	return evs
}

// processState returns the state letter of /proc/PID/stat (T: stopped).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// grant is one grant as the worker printed it: wall clock unix nanoseconds.
type grant struct {
	held              bool
	recv, goAt, useBy int64
	wait              float64
}

// grants parses the worker's GRANT and HOLD lines, in the order printed.
func (w *worker) grants() []grant {
	w.t.Helper()
	var gs []grant
	for _, l := range w.stdout() {
		f := strings.Fields(l)
		if len(f) != 5 || (f[0] != "GRANT" && f[0] != "HOLD") {
			continue
		}
		g := grant{held: f[0] == "HOLD"}
		var err error
		for i, p := range []*int64{&g.recv, &g.goAt, &g.useBy} {
			if *p, err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				w.t.Fatalf("%s: bad line %q", w.name, l)
			}
		}
		if g.wait, err = strconv.ParseFloat(f[4], 64); err != nil {
			w.t.Fatalf("%s: bad line %q", w.name, l)
		}
		gs = append(gs, g)
	}
	return gs
}

// staleUses attributes each event to the grant it came from (the last one
// received before it: a worker holds one grant at a time) and returns the
// events that went later than that grant's use-by (plus tol, for the
// moment between the client's check and the worker's clock reading) or
// that had no grant.
func staleUses(gs []grant, evs []timeline.Event, tol time.Duration) []string {
	var bad []string
	for _, e := range evs {
		k := -1
		for i, g := range gs {
			if g.recv <= e.At {
				k = i
			}
		}
		if k < 0 {
			bad = append(bad, fmt.Sprintf("event at %d before any grant", e.At))
			continue
		}
		if g := gs[k]; e.At > g.useBy+int64(tol) {
			bad = append(bad, fmt.Sprintf("event %v after the use-by of grant #%d (held=%v, wait %.3fs): late by %v",
				time.Unix(0, e.At).Format("15:04:05.000"), k+1, g.held, g.wait, time.Duration(e.At-g.useBy)))
		}
	}
	return bad
}

// checkDoc is `raftpace check --json`'s output, in part.
type checkDoc struct {
	OK   bool `json:"ok"`
	Keys []struct {
		Key          string         `json:"key"`
		Events       int            `json:"events"`
		AchievedRate float64        `json:"achieved_rate"`
		Utilisation  float64        `json:"utilisation"`
		PerNode      map[string]int `json:"per_node"`
		OK           bool           `json:"ok"`
		Windows      []struct {
			Window   string  `json:"window"`
			MaxCount int     `json:"max_count"`
			Bound    float64 `json:"bound"`
			Over     bool    `json:"over"`
		} `json:"windows"`
	} `json:"keys"`
}

// runCheck runs `raftpace check --json` on files for key with the
// windows of 0.5, 1, 2 and 5 s and the agents' use-grace as delta. It
// returns the parsed report and the exit code (0 ok, 1 ceiling exceeded).
func runCheck(t *testing.T, key string, rate float64, burst int, files []string) (checkDoc, int) {
	t.Helper()
	var ws []string
	for _, w := range windows() {
		ws = append(ws, w.String())
	}
	args := append([]string{"check", "--json", "--key", key, "--rate", fmt.Sprint(rate),
		"--burst", fmt.Sprint(burst), "--window", strings.Join(ws, ","), "--delta", useGrace.String()}, files...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("raftpace check: %v", err)
	}
	var doc checkDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Keys) != 1 {
		t.Fatalf("raftpace check (exit %d): %v\n%s%s", code, err, out.String(), errOut.String())
	}
	t.Logf("raftpace check exit %d%s", code, strings.TrimRight("\n"+errOut.String(), "\n"))
	return doc, code
}

// summary is one line per window of a check report: max against bound.
func (d checkDoc) summary() string {
	var sb strings.Builder
	k := d.Keys[0]
	fmt.Fprintf(&sb, "key=%s events=%d rate=%.2f/s (%.1f%%) per worker %v", k.Key, k.Events, k.AchievedRate, 100*k.Utilisation, k.PerNode)
	for _, w := range k.Windows {
		fmt.Fprintf(&sb, "\n  W=%s max=%d bound=%.2f over=%v", w.Window, w.MaxCount, w.Bound, w.Over)
	}
	return sb.String()
}
