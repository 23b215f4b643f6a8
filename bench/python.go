package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftpace/raftpace/bench/baseline"
	"github.com/raftpace/raftpace/bench/report"
	"github.com/raftpace/raftpace/client"
)

// DefaultPython is the interpreter of the "python" approach: Debian's,
// whose python3-psycopg2 and python3-redis bench.py imports.
const DefaultPython = "/usr/bin/python3"

// pythonBenchRel is bench.py's path in the repository.
const pythonBenchRel = "clients/python/bench.py"

// pythonTimeout bounds one bench.py run (a full one takes about 30 s).
const pythonTimeout = 5 * time.Minute

// pythonRun is what the python approach runs, found by probePython.
type pythonRun struct {
	exe, script string
	redis       string // HOST:PORT of a Redis server; "": bench.py starts a redis-server
}

// probePython finds the interpreter, bench.py, its modules and its
// servers, or returns why the python approach cannot run.
func (r *runner) probePython(ctx context.Context) (*pythonRun, string) {
	pr := &pythonRun{exe: r.cfg.Python, script: r.cfg.PythonBench}
	if pr.exe == "" {
		pr.exe = DefaultPython
	}
	if _, err := exec.LookPath(pr.exe); err != nil {
		return nil, fmt.Sprintf("no Python interpreter %s (Debian's python3): %v", pr.exe, err)
	}
	if pr.script == "" {
		p, err := findUp(pythonBenchRel)
		if err != nil {
			return nil, fmt.Sprintf("cannot find %s from the working directory (run from the repository): %v", pythonBenchRel, err)
		}
		pr.script = p
	} else if _, err := os.Stat(pr.script); err != nil {
		return nil, fmt.Sprintf("no bench.py: %v", err)
	}
	// Which of bench.py's modules the interpreter lacks.
	const check = `import importlib
missing = []
for mod, what in (("psycopg2", "psycopg2 (Debian: python3-psycopg2)"), ("redis", "redis-py (Debian: python3-redis)")):
    try:
        importlib.import_module(mod)
    except ImportError:
        missing.append(what)
print(", ".join(missing))
`
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := exec.CommandContext(cctx, pr.exe, "-c", check).CombinedOutput()
	cancel()
	if err != nil {
		return nil, fmt.Sprintf("%s does not run: %v: %s", pr.exe, err, strings.TrimSpace(string(out)))
	}
	if m := strings.TrimSpace(string(out)); m != "" {
		return nil, fmt.Sprintf("%s lacks %s", pr.exe, m)
	}
	if !r.pgOK {
		if err := probePostgres(ctx, r.cfg.PostgresURL); err != nil {
			return nil, fmt.Sprintf("no PostgreSQL server at %s: %v", baseline.RedactURL(r.cfg.PostgresURL), err)
		}
	}
	if r.redisOK {
		pr.redis = r.cfg.RedisAddr
	} else {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c, err := ConnectRedis(pctx, r.cfg.RedisAddr, client.Limit{Rate: 1, Burst: 1}, DefaultGrace)
		cancel()
		if err == nil {
			c.Close()
			pr.redis = r.cfg.RedisAddr
		} else if _, lerr := exec.LookPath("redis-server"); lerr != nil {
			return nil, fmt.Sprintf("no Redis server answers on %s (%v) and no redis-server to start one", r.cfg.RedisAddr, err)
		}
	}
	return pr, ""
}

// pythonGroup runs bench.py --json and puts its figures into the report.
func (r *runner) pythonGroup() group {
	return group{name: "python", steps: []step{{
		label: "Python client vs Postgres and Redis from one process (" + pythonBenchRel + ")",
		run: func(ctx context.Context) (string, error) {
			p, err := r.runPython(ctx)
			if err != nil {
				return "", err
			}
			r.rep.Python = p
			return p.Summary(), nil
		},
	}}}
}

func (r *runner) runPython(ctx context.Context) (*report.Python, error) {
	pr := r.python
	args := []string{pr.script, "--json", "--procs", "4"}
	if r.cfg.Quick {
		args = append(args, "--n", "1000", "--secs", "2")
	}
	if pr.redis != "" {
		args = append(args, "--redis", pr.redis)
	}
	ctx, cancel := context.WithTimeout(ctx, pythonTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pr.exe, args...)
	cmd.Dir = r.dir
	// The Postgres URL goes in the environment, not the command line
	// (ps shows that to everyone): bench.py's --postgres defaults to it.
	cmd.Env = append(os.Environ(), "RAFTPACE_BINARY="+r.cfg.Binary, "RAFTPACE_TEST_POSTGRES="+r.cfg.PostgresURL,
		"PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	logPath := filepath.Join(r.dir, "python-bench.log")
	os.WriteFile(logPath, stderr.Bytes(), 0o644)
	if runErr != nil {
		return nil, fmt.Errorf("%s %s: %v (its output in %s): %s", pr.exe, pythonBenchRel, runErr, logPath, lastLines(stderr.String(), 6))
	}
	p, err := report.ParsePython(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w (its output in %s)", pythonBenchRel, err, logPath)
	}
	return p, nil
}

// lastLines returns s's last n non-empty lines, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
