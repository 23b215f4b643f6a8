package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildGubernator builds the bench/gubernator module into the user's cache
// directory (go build does nothing when the binary is up to date) and
// returns the binary, or an error saying exactly why not.
func buildGubernator(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		d, err := findUp("bench/gubernator/go.mod")
		if err != nil {
			return "", fmt.Errorf("cannot find the bench/gubernator module from the working directory (run from the repository, or --gubernator-src DIR): %w", err)
		}
		dir = filepath.Dir(d)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building it needs the go command: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "raftpace-bench", "gubernator-bench")
	bctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, gobin, "build", "-o", out, ".")
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build in %s failed: %v: %s", dir, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in %s or its parents", rel, dir)
		}
		dir = parent
	}
}

// gubCluster is gubernator instances on loopback, peers of each other.
type gubCluster struct {
	procs     []*proc
	httpAddrs []string
}

func startGubernator(ctx context.Context, bin, dir string, n int) (*gubCluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	grpc, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	httpA, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	g := &gubCluster{httpAddrs: httpA}
	for i := range n {
		log := filepath.Join(dir, fmt.Sprintf("g%d.log", i+1))
		p, err := startProc(fmt.Sprintf("gubernator g%d", i+1), bin,
			[]string{"--grpc", grpc[i], "--http", httpA[i], "--peers", strings.Join(grpc, ",")}, log)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	for i, p := range g.procs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, _ := os.ReadFile(p.logPath)
			if strings.Contains(string(b), "ready") {
				break
			}
			if p.exited() || time.Now().After(deadline) {
				g.stop()
				return nil, fmt.Errorf("gubernator g%d did not start:\n%s", i+1, p.tail())
			}
			select {
			case <-ctx.Done():
				g.stop()
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return g, nil
}

func (g *gubCluster) stop() {
	for _, p := range g.procs {
		p.stop(10 * time.Second)
	}
}
