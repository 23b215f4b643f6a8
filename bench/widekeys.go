package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/bench/report"
	"github.com/raftpace/raftpace/client"
)

// ---- wide keys ---------------------------------------------------------------

// WideGroup is the name Config.Only takes for raftpace's wide-keys group:
// DefaultWideKeys keys (Config.WideKeys) made by one template, each used
// once, on a 3-process cluster.
const WideGroup = "wide"

// DefaultWideKeys is the wide-keys group's key count unless changed.
const DefaultWideKeys = 100_000

// wideTemplate gives the wide keys w0, w1, ... their limit: one event a
// second each, so one use of a key takes its whole burst.
const wideTemplate = "w*"

// wideCallers is how many requests the bench keeps in flight to the
// agents' data planes while it makes the keys.
const wideCallers = 64

// wideKeys measures what many keys made by a template cost: every key is
// reserved once through the agents' data planes (round robin), while the
// leader's RSS and CPU are sampled; then a follower restarts with every
// key's horizon in its log; then the bench waits for the leader to forget
// every idle key and the state every horizon.
func (r *runner) wideKeys(n int) step {
	label := fmt.Sprintf("raftpace, %s keys made by the template %s, used once each, %d processes", report.FormatRate(float64(n)), wideTemplate, ceilingProcs)
	return step{label: label, run: func(ctx context.Context) (string, error) {
		dir := filepath.Join(r.dir, "raftpace-wide")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		c, err := startCluster(ctx, r.cfg.Binary, clusterSpec{dir: dir, size: ceilingProcs})
		if err != nil {
			return "", err
		}
		res, err := measureWideKeys(ctx, c, dir, n)
		if serr := c.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return "", err
		}
		r.rep.WideKeys = res
		return res.Summary(), nil
	}}
}

func measureWideKeys(ctx context.Context, c *cluster, dir string, n int) (*report.WideKeysResult, error) {
	res := &report.WideKeysResult{Keys: n, Processes: len(c.agents), CollectedSecs: -1}
	if err := c.setLimit(ctx, wideTemplate, client.Limit{Rate: 1, Burst: 1}); err != nil {
		return nil, err
	}
	leader, followers, err := c.roles(ctx)
	if err != nil {
		return nil, err
	}
	if res.RSSBefore, err = rss(leader.pid()); err != nil {
		return nil, err
	}
	cpu0, err := cpuTime(leader.pid())
	if err != nil {
		return nil, err
	}
	// The leader's peak RSS while the keys are made.
	var peak atomic.Int64
	peak.Store(res.RSSBefore)
	sampling, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for sampling.Err() == nil {
			if b, err := rss(leader.pid()); err == nil && b > peak.Load() {
				peak.Store(b)
			}
			sleepCtx(sampling, 100*time.Millisecond)
		}
	})
	begin := time.Now()
	failed, err := useKeysOnce(ctx, c, n)
	took := time.Since(begin)
	cpu1, cerr := cpuTime(leader.pid())
	stopSampling()
	sampler.Wait()
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	lastUse := time.Now()
	res.CreateSecs, res.Failed = took.Seconds(), failed
	res.LeaderCPU = (cpu1 - cpu0).Seconds() / took.Seconds()
	res.RSSPeak = peak.Load()
	// Every key in the leader's memory; their horizons follow within a
	// commit or two.
	st, err := waitStatus(ctx, leader, 30*time.Second, func(keys, horizons int) bool { return horizons >= n-failed })
	if err != nil {
		return nil, err
	}
	res.KeysInMemory, res.Horizons = st.KeysInMemory, st.Horizons
	if res.RSSAfter, err = rss(leader.pid()); err != nil {
		return nil, err
	}
	if err := restartFollower(ctx, followers[0], leader, dir, res); err != nil {
		return nil, err
	}
	// Idle collection: a key leaves after a minute without a request
	// (node/pacer's DefaultIdleAfter); allow a minute more for the entries
	// that drop the horizons.
	wait := 2*time.Minute - time.Since(lastUse)
	if _, err := waitStatus(ctx, leader, wait, func(keys, horizons int) bool { return keys == 0 && horizons == 0 }); err == nil {
		res.CollectedSecs = time.Since(lastUse).Seconds()
		res.RSSCollected, _ = rss(leader.pid())
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, nil
}

// useKeysOnce reserves one event of each of the n keys w0..w(n-1) through
// the agents' data planes, round robin, with wideCallers requests in
// flight. It returns how many were not granted (a key's one slot is free,
// so every one should be).
func useKeysOnce(ctx context.Context, c *cluster, n int) (failed int, err error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: wideCallers}}
	var next, bad atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range wideCallers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				a := c.agents[i%len(c.agents)]
				u := "http://" + a.ready.HTTPAddr + "/v1/reserve/" + url.PathEscape("w"+strconv.Itoa(i))
				resp, err := hc.Post(u, "application/json", strings.NewReader(`{"max_wait":1}`))
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("bench: wide keys: %w", err) })
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad.Add(1)
					once.Do(func() {
						firstErr = fmt.Errorf("bench: wide keys: reserve w%d: %s: %s", i, resp.Status, bytes.TrimSpace(body))
					})
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if bad.Load() == 0 && firstErr != nil { // a broken connection, not an answer
		return 0, firstErr
	}
	if bad.Load() > int64(n/100) { // a few may lose a race to a lease's renewal; more is a fault
		return 0, firstErr
	}
	return int(bad.Load()), nil
}

// restartFollower stops a follower (SIGTERM) and starts it again on its
// data dir, timing its start until ready and until it holds every horizon
// the leader's state holds. It joins through the leader, as an operator
// restarting it would: the first agent was started with no --join (it was
// the seed), and its ports are the OS's, so without one it found nobody
// and the step failed whenever it was the follower restarted ("n1: not
// there within 1m0s", 7 runs of 18 on 2026-12-07, 3 of 4 on b5c843b; its
// joinLoop, given no address and no Postgres, found nobody, and the
// leader's rejoin of failed members dials the old gossip port).
func restartFollower(ctx context.Context, a, leader *agentProc, dir string, res *report.WideKeysResult) error {
	args := slices.Clone(a.cmd.Args[1:])
	if !slices.Contains(args, "--join") {
		args = append(args, "--join", leader.ready.GossipAddr)
	}
	if err := a.stop(15 * time.Second); err != nil {
		return fmt.Errorf("bench: stopping %s: %w", a.id, err)
	}
	ready := filepath.Join(dir, a.id+".ready.json")
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	begin := time.Now()
	p, err := startProc("agent "+a.id, a.cmd.Path, args, a.logPath)
	if err != nil {
		return err
	}
	a.proc = p
	if err := readJSONFile(ctx, p, ready, &a.ready, time.Minute); err != nil {
		return err
	}
	res.RestartReadySecs = time.Since(begin).Seconds()
	if _, err := waitStatus(ctx, a, time.Minute, func(_, horizons int) bool { return horizons >= res.Horizons }); err != nil {
		return fmt.Errorf("bench: restarted %s: %w", a.id, err)
	}
	res.RestartCaughtSecs = time.Since(begin).Seconds()
	return nil
}

// waitStatus polls a's status until ok(keys in memory, horizons) holds,
// at most d.
func waitStatus(ctx context.Context, a *agentProc, d time.Duration, ok func(keys, horizons int) bool) (st statusCounts, err error) {
	deadline := time.Now().Add(d)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := a.admin().Status(sctx)
		cancel()
		if err == nil {
			st = statusCounts{KeysInMemory: s.KeysInMemory, Horizons: s.Horizons}
			if ok(st.KeysInMemory, st.Horizons) {
				return st, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st, fmt.Errorf("bench: %s: not there within %v (keys in memory %d, horizons %d, %v)", a.id, d, st.KeysInMemory, st.Horizons, err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

type statusCounts struct{ KeysInMemory, Horizons int }

// rss returns the resident set of process pid (VmRSS), in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("bench: no VmRSS in /proc status")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
