package e2e

import (
	"bufio"
	"context"
	encbin "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// floodStatus is the part of `raftpace status --json` this test reads
// (the harness's statusDoc has no term).
type floodStatus struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Leader string `json:"leader"`
	Mode   string `json:"mode"`
	Term   uint64 `json:"term"`
}

func floodStatusOf(a *agent) (floodStatus, error) {
	var st floodStatus
	out, code := a.cli("status", "--json")
	if code != 0 {
		return st, fmt.Errorf("%s: status exit %d: %s", a.id, code, out)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("%s: status json: %v: %s", a.id, err, out)
	}
	return st, nil
}

// floodMetrics returns the transport_* lines of an agent's /metrics, for
// the log.
func floodMetrics(a *agent) string {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + a.addrs.HTTPAddr + "/metrics")
	if err != nil {
		return "metrics: " + err.Error()
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, m := range []string{"transport_accepted_total", "transport_rejected_total", "transport_connections_in"} {
			if strings.Contains(l, m) {
				lines = append(lines, l)
			}
		}
	}
	return strings.Join(lines, "; ")
}

// floodCounts are what the flooding loops saw.
type floodCounts struct {
	opened        atomic.Int64 // connections established
	dialErrs      atomic.Int64 // dials that failed
	closedByAgent atomic.Int64 // connections the agent closed before the flood ended
	quickClose    atomic.Int64 // ... of them within 50 ms of connecting (refused at once)
	byKind        [3]atomic.Int64
}

// Flood kinds, one third of the loops each.
const (
	floodKindLoris   = iota // connects and sends nothing
	floodKindJunk           // random bytes
	floodKindStalled        // RPC stream byte, a length prefix of 1 MiB, 3 bytes
)

// runFlood runs loops connection loops against addr from 127.0.0.2 until
// ctx is done. Each loop dials, sends what its kind sends, waits for the
// agent to close the connection (or for the flood to end) and redials
// 100 ms later.
func runFlood(ctx context.Context, addr string, loops int, fc *floodCounts) *sync.WaitGroup {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	var wg sync.WaitGroup
	for i := range loops {
		kind := i % 3
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 0xf100d))
			for ctx.Err() == nil {
				c, err := dialer.DialContext(ctx, "tcp", addr)
				if err != nil {
					if ctx.Err() == nil {
						fc.dialErrs.Add(1)
					}
				} else {
					fc.opened.Add(1)
					fc.byKind[kind].Add(1)
					connected := time.Now()
					stop := context.AfterFunc(ctx, func() { c.Close() })
					switch kind {
					case floodKindJunk:
						junk := make([]byte, 1+rng.IntN(1024))
						for j := range junk {
							junk[j] = byte(rng.Uint32())
						}
						_, _ = c.Write(junk)
					case floodKindStalled:
						msg := encbin.BigEndian.AppendUint32([]byte{0x02}, 1<<20)
						_, _ = c.Write(append(msg, 0xde, 0xad, 0xbe))
					}
					_, _ = io.Copy(io.Discard, c) // until the agent closes it, or the flood ends
					stop()
					c.Close()
					if ctx.Err() == nil {
						fc.closedByAgent.Add(1)
						if time.Since(connected) < 50*time.Millisecond {
							fc.quickClose.Add(1)
						}
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return &wg
}

// TestFlood_RealProcesses floods one follower's raft/RPC port from another
// IP with ~300 hostile connection loops (slow loris, junk, stalled 1 MiB
// frames) while three agents admit a shared key at full demand. The
// ceiling holds throughout, the fleet keeps admitting at its rate, the
// flooded agent keeps its share, and it is still up and following a leader.
func TestFlood_RealProcesses(t *testing.T) {
	const (
		rate     = 100.0
		burst    = 5
		loops    = 300
		warmup   = time.Second
		baseline = 4 * time.Second
		floodFor = 4 * time.Second
		after    = 2 * time.Second
	)
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("cannot bind 127.0.0.2 (loopback aliases are Linux-only): %v", err)
	} else {
		ln.Close()
	}

	c := startCluster(t, 3, agentOpts{loads: []string{"k:4"}})
	c.agents[0].mustCLI("limit", "set", "k", "--rate", "100", "--burst", "5")
	set := time.Now()

	before, err := floodStatusOf(c.agents[0])
	if err != nil {
		t.Fatal(err)
	}
	var target *agent
	for _, a := range c.agents {
		if a.id != before.Leader {
			target = a
			break
		}
	}
	targetBefore, err := floodStatusOf(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s (term %d); flooding follower %s at %s (its view: state=%s leader=%s term=%d mode=%s)",
		before.Leader, before.Term, target.id, target.addrs.Addr,
		targetBefore.State, targetBefore.Leader, targetBefore.Term, targetBefore.Mode)
	t.Logf("%s transport before: %s", target.id, floodMetrics(target))

	time.Sleep(warmup)
	b0 := time.Now()
	time.Sleep(baseline)

	f0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var fc floodCounts
	wg := runFlood(ctx, target.addrs.Addr, loops, &fc)
	time.Sleep(floodFor / 2)
	t.Logf("%s transport mid-flood: %s", target.id, floodMetrics(target))
	time.Sleep(floodFor - floodFor/2)
	f1 := time.Now()
	cancel()
	wg.Wait()
	t.Logf("flood: %d loops (%d per kind), %d connections opened (loris %d, junk %d, stalled %d), %d dial errors, "+
		"%d closed by the agent before the flood ended (%d within 50 ms of connecting)",
		loops, loops/3, fc.opened.Load(), fc.byKind[0].Load(), fc.byKind[1].Load(), fc.byKind[2].Load(),
		fc.dialErrs.Load(), fc.closedByAgent.Load(), fc.quickClose.Load())

	time.Sleep(after)
	end := time.Now()

	// (4) The flooded agent is up and follows a leader.
	if !target.running() {
		t.Fatalf("%s died under the flood; log:\n%s", target.id, target.tail())
	}
	targetAfter, err := floodStatusOf(target)
	if err != nil {
		t.Errorf("%s: status after the flood: %v", target.id, err)
	} else {
		t.Logf("%s after: state=%s leader=%s term=%d mode=%s", target.id, targetAfter.State, targetAfter.Leader, targetAfter.Term, targetAfter.Mode)
		if targetAfter.Term != targetBefore.Term || targetAfter.Leader != targetBefore.Leader {
			t.Logf("%s: leader/term changed during the flood (%s/%d -> %s/%d); checking the cluster agrees on a leader",
				target.id, targetBefore.Leader, targetBefore.Term, targetAfter.Leader, targetAfter.Term)
			if l := c.waitLeader(10 * time.Second); l == "" {
				t.Errorf("no agreed leader after the flood")
			}
		}
		if targetAfter.Leader == "" {
			t.Errorf("%s knows no leader after the flood", target.id)
		}
	}
	t.Logf("%s transport after: %s", target.id, floodMetrics(target))
	c.stopAll()

	evs := c.events()
	// (1) The ceiling over the whole run.
	rep := check(evs, "k", rate, burst, set.UnixNano(), end.UnixNano())
	t.Log(rep.String())
	if !rep.OK() {
		t.Errorf("ceiling exceeded:\n%s", rep.String())
	}

	all := keySeries(evs, "k")
	var mine []timeline.Event
	for _, e := range evs {
		if e.Node == target.id {
			mine = append(mine, e)
		}
	}
	own := keySeries(mine, "k")
	baseRate, floodRate, afterRate := all.rate(b0, f0), all.rate(f0, f1), all.rate(f1, end)
	baseOwn, floodOwn := own.rate(b0, f0), own.rate(f0, f1)
	t.Logf("fleet admitted: baseline %.1f/s, flood %.1f/s, after %.1f/s (R=%v)", baseRate, floodRate, afterRate, rate)
	for _, a := range c.agents {
		var evsA []timeline.Event
		for _, e := range evs {
			if e.Node == a.id {
				evsA = append(evsA, e)
			}
		}
		s := keySeries(evsA, "k")
		t.Logf("  %s: baseline %d (%.1f/s), flood %d (%.1f/s), after %d", a.id,
			s.count(b0, f0), s.rate(b0, f0), s.count(f0, f1), s.rate(f0, f1), s.count(f1, end))
	}
	// (2) The fleet keeps its rate during the flood.
	if floodRate < 0.9*rate {
		t.Errorf("fleet admitted %.1f/s during the flood, %.0f%% of R=%v; want at least 90%%", floodRate, 100*floodRate/rate, rate)
	}
	// (3) The flooded agent keeps at least half its baseline share.
	if baseOwn == 0 {
		t.Errorf("%s admitted nothing in the baseline", target.id)
	} else if floodOwn < 0.5*baseOwn {
		t.Errorf("%s admitted %.1f/s during the flood against %.1f/s in the baseline (%.0f%%); want at least 50%%",
			target.id, floodOwn, baseOwn, 100*floodOwn/baseOwn)
	}
}
