package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Network namespaces for the chaos suite.
//
// Each scenario runs its agents in a network namespace of its own, so
// scenarios run in parallel on fixed ports and nothing they do reaches the
// host's network. Node k binds everything to its own loopback address
// 127.0.1.k (raft and RPC on :7400, gossip TCP and UDP on :7401, the admin
// API on :7402) and dials from it, so a link between two nodes is cut with
// policy routing inside the namespace, iproute2 only:
//
//	ip rule add pref 32765 table local; ip rule del pref 0   (once)
//	ip rule add pref 100 from 127.0.1.A to 127.0.1.B blackhole  (and B to A)
//
// The local table normally sits at priority 0, before any rule we could
// add; moved behind ours, a blackhole rule for a source/destination pair
// makes every packet between the pair fail its route lookup: new TCP
// connections fail (EINVAL), established ones stall (their retransmissions
// are dropped until the rule goes and they go through again), and UDP
// sendto fails. Traffic of other pairs, and the CLI's (from 127.0.0.1),
// is untouched. TestChaos_PartitionCutsTraffic checks all of that.

// needNetns skips a test that needs root and iproute2, or fails it when CI
// is set (CI runs as root: a skip there would hide the whole suite).
func needNetns(t *testing.T) {
	t.Helper()
	why := ""
	if runtime.GOOS != "linux" {
		why = "network namespaces need Linux"
	} else if os.Geteuid() != 0 {
		why = "needs root to create network namespaces (ip netns add)"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs iproute2's ip: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chaos suite: %s (CI is set: not skipping)", why)
	}
	t.Skip("chaos suite: " + why)
}

// netns is a network namespace owned by one test, deleted at its end.
type netns struct {
	t    *testing.T
	name string

	mu   sync.Mutex
	cuts map[[2]int]bool // directed node pairs blackholed now
}

// newNetns creates a namespace named after the scenario, with lo up and
// the local routing table moved behind the cut rules.
func newNetns(t *testing.T, scenario string) *netns {
	t.Helper()
	ns := &netns{t: t, name: fmt.Sprintf("rp-%s-%08x", scenario, rand.Uint32()), cuts: map[[2]int]bool{}}
	if out, err := exec.Command("ip", "netns", "add", ns.name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.name, err, out)
		}
	})
	ns.ip("link", "set", "lo", "up")
	ns.ip("rule", "add", "pref", "32765", "table", "local")
	ns.ip("rule", "del", "pref", "0")
	return ns
}

// ip runs `ip -n NS args...` and fails the test on error.
func (ns *netns) ip(args ...string) {
	ns.t.Helper()
	full := append([]string{"-n", ns.name}, args...)
	if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
		ns.t.Fatalf("ip %s: %v: %s", strings.Join(full, " "), err, out)
	}
}

// nodeIP is node k's loopback address (k from 1).
func nodeIP(k int) string { return fmt.Sprintf("127.0.1.%d", k) }

// maxNodes bounds the node numbers a cut considers.
const maxNodes = 8

// cut blocks all traffic between node a and each of bs, both ways.
func (ns *netns) cut(a int, bs ...int) {
	ns.t.Helper()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, b := range bs {
		for _, p := range [][2]int{{a, b}, {b, a}} {
			if p[0] == p[1] || ns.cuts[p] {
				continue
			}
			ns.ip("rule", "add", "pref", "100", "from", nodeIP(p[0]), "to", nodeIP(p[1]), "blackhole")
			ns.cuts[p] = true
		}
	}
}

// isolate cuts node k off from every other node.
func (ns *netns) isolate(k int) {
	ns.t.Helper()
	var others []int
	for o := 1; o <= maxNodes; o++ {
		if o != k {
			others = append(others, o)
		}
	}
	ns.cut(k, others...)
}

// split cuts every node of group a off from every node of group b.
func (ns *netns) split(a, b []int) {
	ns.t.Helper()
	for _, x := range a {
		ns.cut(x, b...)
	}
}

// heal removes every cut.
func (ns *netns) heal() {
	ns.t.Helper()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for p := range ns.cuts {
		ns.ip("rule", "del", "pref", "100", "from", nodeIP(p[0]), "to", nodeIP(p[1]), "blackhole")
		delete(ns.cuts, p)
	}
}

// The partition probe: TestChaos_PartitionCutsTraffic runs this test
// binary again inside a namespace (TestMain sees RAFTPACE_E2E_PROBE) to
// look at sockets from the inside while the test cuts and heals the link
// between 127.0.1.1 and 127.0.1.2. The probe and the test take turns
// through lines on stdin and stdout.

const probeEnv = "RAFTPACE_E2E_PROBE"

// partitionProbe prints "ok ..." and "FAIL ..." lines and "ready",
// "cut-done", "heal-done" when it waits for the test; it returns the exit
// code.
func partitionProbe() int {
	in := bufio.NewScanner(os.Stdin)
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	failed := 0
	check := func(ok bool, format string, args ...any) {
		if ok {
			say("ok "+format, args...)
		} else {
			failed++
			say("FAIL "+format, args...)
		}
	}
	fatal := func(what string, err error) int {
		say("FAIL %s: %v", what, err)
		return 1
	}
	dial := func(from string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: time.Second}
		return d.Dial("tcp", "127.0.1.2:9000")
	}
	timedOut := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	udp := func(from, to *net.UDPConn) error {
		if _, err := from.WriteToUDP([]byte("u"), to.LocalAddr().(*net.UDPAddr)); err != nil {
			return err
		}
		to.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
		_, _, err := to.ReadFromUDP(make([]byte, 16))
		return err
	}

	ln, err := net.Listen("tcp", "127.0.1.2:9000")
	if err != nil {
		return fatal("listen", err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	client, err := dial("127.0.1.1")
	if err != nil {
		return fatal("dial before the cut", err)
	}
	server := <-accepted
	u1, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.1.1"), Port: 9001})
	if err != nil {
		return fatal("udp", err)
	}
	u2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.1.2"), Port: 9001})
	if err != nil {
		return fatal("udp", err)
	}
	check(udp(u1, u2) == nil, "UDP 127.0.1.1 -> 127.0.1.2 before the cut")
	say("ready")
	in.Scan()

	_, err = client.Write([]byte("x"))
	check(err == nil, "a write on the established connection is accepted locally (%v)", err)
	server.SetReadDeadline(time.Now().Add(time.Second))
	_, err = server.Read(make([]byte, 1))
	check(timedOut(err), "the established TCP connection stalls (read: %v)", err)
	err = udp(u1, u2)
	check(err != nil, "UDP 127.0.1.1 -> 127.0.1.2 is not delivered (%v)", err)
	err = udp(u2, u1)
	check(err != nil, "UDP 127.0.1.2 -> 127.0.1.1 is not delivered (%v)", err)
	c, err := dial("127.0.1.1")
	check(err != nil, "a new TCP connection 127.0.1.1 -> 127.0.1.2 fails (%v)", err)
	if c != nil {
		c.Close()
	}
	c, err = dial("127.0.1.3")
	check(err == nil, "a new TCP connection of an uncut pair, 127.0.1.3 -> 127.0.1.2, works (%v)", err)
	if c != nil {
		c.Close()
	}
	say("cut-done")
	in.Scan()

	server.SetReadDeadline(time.Now().Add(15 * time.Second))
	b := make([]byte, 1)
	_, err = server.Read(b)
	check(err == nil && b[0] == 'x', "after healing, the stalled byte arrives on the established connection (%v)", err)
	check(udp(u1, u2) == nil, "after healing, UDP 127.0.1.1 -> 127.0.1.2 is delivered")
	c, err = dial("127.0.1.1")
	check(err == nil, "after healing, a new TCP connection 127.0.1.1 -> 127.0.1.2 works (%v)", err)
	if c != nil {
		c.Close()
	}
	say("heal-done")
	return min(failed, 1)
}

// The cut works as the chaos scenarios assume: seen from sockets inside
// the namespace, an established TCP connection between a cut pair stalls
// and resumes after healing, new connections fail, UDP is not delivered
// either way, and other pairs are untouched.
func TestChaos_PartitionCutsTraffic(t *testing.T) {
	needNetns(t)
	t.Parallel()
	ns := newNetns(t, "probe")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.name, self)
	cmd.Env = append(os.Environ(), probeEnv+"=partition")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	until := func(mark string) {
		t.Helper()
		for lines.Scan() {
			line := lines.Text()
			switch {
			case line == mark:
				return
			case strings.HasPrefix(line, "FAIL"):
				t.Error("probe: " + line)
			default:
				t.Log("probe: " + line)
			}
		}
		t.Fatalf("probe ended before %q: %v", mark, cmd.Wait())
	}
	until("ready")
	ns.cut(1, 2)
	fmt.Fprintln(stdin, "go")
	until("cut-done")
	ns.heal()
	fmt.Fprintln(stdin, "go")
	until("heal-done")
	if err := cmd.Wait(); err != nil && !t.Failed() {
		t.Errorf("probe: %v", err)
	}
}
