package raftpace_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rooms is ARCHITECTURE.md's table of arrows: for every package of the
// module, the packages of the module it may import ("." is the root
// package raftpace). A package missing from the table, or an import the
// table does not allow, fails TestArchitecture: a new arrow is a decision
// to write down in ARCHITECTURE.md and here, not an accident.
var rooms = map[string][]string{
	// Leaves: they import nothing of the project but each other.
	".":                   {},
	"fsm":                 {},
	"transport":           {},
	"internal/gcra":       {},
	"internal/logging":    {},
	"internal/timeline":   {},
	"internal/fuzzcorpus": {},
	"internal/loop":       {},
	"internal/datadir":    {},
	"internal/pgstore":    {"fsm", "internal/logging"},

	// node's rooms: each does one job, is given what it needs by node and
	// never imports node or a sibling room (wire and shares excepted: the
	// protocol, and the shares' interface of record).
	"node/wire":       {".", "fsm"},
	"node/pacer":      {".", "fsm", "internal/gcra", "node/wire"},
	"node/shares":     {"fsm", "node/wire"},
	"node/gate":       {".", "fsm", "node/wire"},
	"node/slots":      {".", "fsm", "node/wire"},
	"node/lease":      {".", "fsm", "node/wire"},
	"node/batch":      {".", "fsm", "node/wire"},
	"node/leadercall": {".", "node/wire"},
	"node/fallback":   {".", "fsm", "internal/gcra", "internal/loop", "internal/pgstore", "node/wire"},
	"node/membership": {".", "fsm", "internal/logging", "internal/loop", "node/wire"},
	"node/pglink":     {"fsm", "internal/loop", "internal/pgstore"},
	"node/apply":      {"fsm"},
	"node/tally":      {},
	// The shapes of what a node reports (status, stats, metrics): plain
	// data its readers use without importing node.
	"node/report": {},

	// node wires the rooms together and owns the lifecycle.
	"node": {".", "fsm", "transport", "internal/datadir", "internal/logging", "internal/loop",
		"node/wire", "node/pacer", "node/shares", "node/gate", "node/slots", "node/lease", "node/batch", "node/leadercall",
		"node/fallback", "node/membership", "node/pglink", "node/apply", "node/tally", "node/report"},
	"node/nodetest": {"node"},

	// What a worker calls, and the agent's surfaces beside it.
	"client":        {".", "fsm", "node"},
	"agent/admin":   {".", "fsm", "node/report"},
	"agent/metrics": {"node/report"},
	"agent/web":     {"node/report"},
	// The data plane for workers without a node; admin's body reader and
	// JSON writer are shared.
	"agent/dataplane": {".", "agent/admin", "fsm"},

	// The benchmark and the command sit on top.
	"bench/load":     {},
	"bench/report":   {"bench/load"},
	"bench/baseline": {"client"},
	"bench": {"agent/admin", "bench/baseline", "bench/load", "bench/report", "client",
		"internal/timeline", "node/report"},
	// The binary: dispatch and flags in main, one job per internal package.
	"cmd/raftpace/internal/cmdline":    {},
	"cmd/raftpace/internal/policy":     {"cmd/raftpace/internal/render", "fsm"},
	"cmd/raftpace/internal/atomicfile": {},
	"cmd/raftpace/internal/certs":      {"cmd/raftpace/internal/atomicfile"},
	"cmd/raftpace/internal/render":     {"fsm", "node/report"},
	"cmd/raftpace/internal/loadgen": {".", "bench", "client", "cmd/raftpace/internal/atomicfile", "fsm",
		"internal/gcra", "internal/loop", "internal/timeline", "node"},
	"cmd/raftpace/internal/demo": {"cmd/raftpace/internal/certs", "cmd/raftpace/internal/loadgen", "fsm",
		"internal/loop", "internal/timeline", "node"},
	"cmd/raftpace/internal/agent": {".", "agent/admin", "agent/dataplane", "agent/metrics", "agent/web", "client",
		"cmd/raftpace/internal/atomicfile", "cmd/raftpace/internal/loadgen", "cmd/raftpace/internal/policy", "fsm", "node"},
	"cmd/raftpace": {"*"},
	"e2e":          {"*"},
}

const module = "github.com/raftpace/raftpace"

// TestArchitecture holds the code to ARCHITECTURE.md's arrows.
func TestArchitecture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := rel(fields[0])
		allowed, ok := rooms[pkg]
		if !ok {
			t.Errorf("package %s is not in ARCHITECTURE.md's table (architecture_test.go rooms): say what it may import", pkg)
			continue
		}
		seen++
		if slices.Contains(allowed, "*") {
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if dep := rel(imp); !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s: an arrow ARCHITECTURE.md does not allow (allowed: %q)", pkg, dep, allowed)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d packages listed: go list output\n%s", seen, out)
	}
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// Room sizes (ARCHITECTURE.md): a package of more than maxPackageLines
// lines of non-test Go, or a file of more than maxFileLines, has more than
// one job. sizeDebts lists the packages allowed over it for now, each at a
// ceiling it may only go down from.
const (
	maxPackageLines = 2500
	maxFileLines    = 500
)

var sizeDebts = map[string]int{
	"node": 2603,
}

func TestRoomSizes(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, dir := rel(fields[0]), fields[1]
		total := 0
		for _, f := range fields[2:] {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			n := bytes.Count(b, []byte("\n"))
			total += n
			if n > maxFileLines {
				t.Errorf("%s/%s: %d lines, more than %d: split it by concern", pkg, f, n, maxFileLines)
			}
		}
		limit := maxPackageLines
		if debt, ok := sizeDebts[pkg]; ok {
			limit = debt
		}
		if total > limit {
			t.Errorf("package %s: %d lines of non-test Go, more than %d: give a job of it a package of its own", pkg, total, limit)
		}
	}
}
