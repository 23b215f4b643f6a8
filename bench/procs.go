package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one child process of the bench, its output going to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // the exit status, once done is closed
	// termSent: SIGTERM was sent. Only the goroutine that runs the step
	// stops its processes, so it needs no lock.
	termSent bool
}

// startProc starts bin with args, stdout and stderr appended to logPath.
// The process is not tied to ctx: stop it with stop.
func startProc(name, bin string, args []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	// Its own process group: a Ctrl-C at the terminal reaches the bench,
	// which then stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("bench: starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// cleanEnv is an agent's environment: no RAFTPACE_ variable (the flags
// say everything), and GOTRACEBACK=all for the stacks of a hang (stop).
func cleanEnv() []string {
	env := []string{"GOTRACEBACK=all"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTPACE_") && !strings.HasPrefix(kv, "GOTRACEBACK=") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit by itself, at most d (then kills it).
func (p *proc) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("bench: %s: %w\n%s", p.name, p.err, p.tail())
		}
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("bench: %s did not finish within %v\n%s", p.name, d, p.tail())
	case <-ctx.Done():
		p.stop(5 * time.Second)
		return ctx.Err()
	}
}

// terminate sends SIGTERM, once: a second one makes an agent exit at once,
// without writing its load report.
func (p *proc) terminate() {
	if !p.termSent && !p.exited() {
		p.termSent = true
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// stop sends SIGTERM (if not sent yet) and waits up to d for the exit,
// then SIGKILL.
func (p *proc) stop(d time.Duration) error {
	if p.exited() {
		return p.err
	}
	p.terminate()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		// SIGQUIT first: the Go runtime writes every goroutine's stack to
		// the agent's log (GOTRACEBACK=all), which says where it hung.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.kill()
		}
		return fmt.Errorf("bench: %s did not stop within %v of SIGTERM; ended with SIGQUIT (its goroutines are in its log)", p.name, d)
	}
}

func (p *proc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the end of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimRight(string(b), "\n")
}

// cpuTime returns the user+system CPU time the process pid has used, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s: USER_HZ is
// 100 on every Linux architecture Go supports).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: unreadable /proc stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad /proc stat times")
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// readJSONFile polls path until it holds a JSON document that decodes into
// v, the process p exits, or d passes.
func readJSONFile(ctx context.Context, p *proc, path string, v any, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, v) == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("bench: %s exited before writing %s (%v)\n%s", p.name, path, p.err, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s did not write %s within %v\n%s", p.name, path, d, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback addresses with ports the OS had free (for
// servers, like gubernator's, that must know their peers' ports before
// they start).
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
