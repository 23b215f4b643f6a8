package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Python is what clients/python/bench.py --json measured from one Python
// process: a reservation through the agent's unix socket (the Python
// client), the Postgres pacer's statement (psycopg2) and the Redis GCRA
// script (redis-py); then the agent's throughput serving socket
// reservations to several Python processes, with the Python client and with
// raw-socket clients. The JSON tags are bench.py's document's.
type Python struct {
	Version      string             `json:"python"`
	CPUs         int                `json:"cpus"`
	LoadAvg      []float64          `json:"loadavg"`
	N            int                `json:"n"` // reservations per latency measurement
	Latency      []PythonLatency    `json:"latency"`
	Throughput   []PythonThroughput `json:"throughput"`
	TargetPerSec float64            `json:"target_per_s"`
}

// PythonLatency is one path's latency from the Python process. ID is
// "socket", "postgres" or "redis".
type PythonLatency struct {
	ID        string  `json:"id"`
	Label     string  `json:"label"`
	P50       float64 `json:"p50_s"`
	P99       float64 `json:"p99_s"`
	PerSecond float64 `json:"ops_per_s"`
}

// PythonThroughput is the agent's throughput serving Procs processes for
// Secs seconds. ID is "client" (raftpace.Client) or "raw" (a prebuilt
// request on a bare socket).
type PythonThroughput struct {
	ID        string  `json:"id"`
	Label     string  `json:"label"`
	Procs     int     `json:"procs"`
	Secs      float64 `json:"secs"`
	PerSecond float64 `json:"per_s"`
	AgentCPU  float64 `json:"agent_cpu_s"`
	ClientCPU float64 `json:"client_cpu_s"`
}

// PythonTitle is the title of the report's Python section.
const PythonTitle = "Python through the agent's socket vs the same process's Postgres statement and Redis script"

// DefaultPythonTarget is the throughput target (reservations/s through
// the socket from Python processes, on 2 cores) when the document has none.
const DefaultPythonTarget = 20000

// ParsePython parses bench.py's JSON document and checks that it holds the
// figures the report shows: the socket's and Postgres's latency and the
// Python client's throughput, all finite and non-negative.
func ParsePython(b []byte) (*Python, error) {
	var p Python
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("bench.py's JSON: %w", err)
	}
	if p.TargetPerSec <= 0 {
		p.TargetPerSec = DefaultPythonTarget
	}
	var errs []error
	for _, id := range []string{"socket", "postgres"} {
		if p.latency(id) == nil {
			errs = append(errs, fmt.Errorf("no %q latency", id))
		}
	}
	if p.throughput("client") == nil {
		errs = append(errs, errors.New(`no "client" throughput`))
	}
	ok := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	for _, l := range p.Latency {
		if !ok(l.P50) || !ok(l.P99) || !ok(l.PerSecond) {
			errs = append(errs, fmt.Errorf("latency %q: a figure is negative or not finite", l.ID))
		}
	}
	for _, t := range p.Throughput {
		if !ok(t.PerSecond) || !ok(t.Secs) || !ok(t.AgentCPU) || !ok(t.ClientCPU) || t.Procs < 0 {
			errs = append(errs, fmt.Errorf("throughput %q: a figure is negative or not finite", t.ID))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench.py's JSON: %w", err)
	}
	return &p, nil
}

func (p *Python) latency(id string) *PythonLatency {
	for i := range p.Latency {
		if p.Latency[i].ID == id {
			return &p.Latency[i]
		}
	}
	return nil
}

func (p *Python) throughput(id string) *PythonThroughput {
	for i := range p.Throughput {
		if p.Throughput[i].ID == id {
			return &p.Throughput[i]
		}
	}
	return nil
}

// TargetMet reports whether the Python client's throughput met the target.
func (p *Python) TargetMet() bool {
	t := p.throughput("client")
	return t != nil && t.PerSecond >= p.TargetPerSec
}

// Summary is a one-line digest for the progress line.
func (p *Python) Summary() string {
	s := ""
	if sk, pg := p.latency("socket"), p.latency("postgres"); sk != nil && pg != nil {
		s = fmt.Sprintf("socket p50 %s vs Postgres %s", fmtDur(secNS(sk.P50)), fmtDur(secNS(pg.P50)))
	}
	if t := p.throughput("client"); t != nil {
		s += fmt.Sprintf(", %d Python processes %s/s", t.Procs, FormatCount(t.PerSecond))
	}
	return s
}

func secNS(s float64) int64 { return int64(math.Round(s * float64(time.Second))) }

// pythonLabel names a latency path in the table.
func pythonLabel(l PythonLatency) string {
	switch l.ID {
	case "socket":
		return "raftpace agent's unix socket: client.reserve (Python client)"
	case "postgres":
		return "Postgres pacer: upsert-and-return statement (psycopg2)"
	case "redis":
		return "Redis GCRA Lua: EVALSHA (redis-py)"
	}
	if l.Label != "" {
		return l.Label
	}
	return l.ID
}

// section renders the Python section: the latency table with each
// figure's ratio to Postgres's, and the throughput lines with the target.
func (p *Python) section(b *strings.Builder) {
	fmt.Fprintf(b, "## %s\n\n", PythonTitle)
	fmt.Fprintf(b, "One Python %s process, %s reservations per path in a closed loop (clients/python/bench.py; %d CPUs",
		p.Version, FormatRate(float64(p.N)), p.CPUs)
	if len(p.LoadAvg) > 0 {
		fmt.Fprintf(b, ", load average %.2f", p.LoadAvg[0])
	}
	b.WriteString("); an unlimited rate, so nobody waits. **vs Postgres**: the figure divided by the Postgres statement's.\n\n")
	b.WriteString("| path | p50 | p99 | ops/s | p50 vs Postgres | p99 vs Postgres | ops/s vs Postgres |\n|---|---|---|---|---|---|---|\n")
	pg := p.latency("postgres")
	for _, l := range p.Latency {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", pythonLabel(l), fmtDur(secNS(l.P50)), fmtDur(secNS(l.P99)),
			FormatCount(l.PerSecond), times(l.P50, pg.P50), times(l.P99, pg.P99), times(l.PerSecond, pg.PerSecond))
	}
	b.WriteString("\n")
	for _, t := range p.Throughput {
		what := "the Python client (raftpace.Client)"
		if t.ID == "raw" {
			what = "minimal raw-socket clients (a prebuilt request, the answer read to its Content-Length: the agent's ceiling)"
		} else if t.ID != "client" {
			what = t.Label
		}
		fmt.Fprintf(b, "- Agent throughput, %d Python processes x %.0f s of reserve through the socket, %s: **%s reservations/s**",
			t.Procs, t.Secs, what, FormatRate(math.Round(t.PerSecond)))
		if t.ID == "client" {
			met := "**not met**"
			if t.PerSecond >= p.TargetPerSec {
				met = "**met**"
			}
			fmt.Fprintf(b, "; target >= %s/s on 2 cores: %s (%d CPUs here)", FormatRate(p.TargetPerSec), met, p.CPUs)
		}
		b.WriteString(".")
		if t.Secs > 0 {
			fmt.Fprintf(b, " CPU: agent %.0f%% of a core, clients %.0f%%", 100*t.AgentCPU/t.Secs, 100*t.ClientCPU/t.Secs)
			if n := t.PerSecond * t.Secs; n > 0 {
				fmt.Fprintf(b, "; per reservation agent %.0f µs, client %.0f µs", t.AgentCPU/n*1e6, t.ClientCPU/n*1e6)
			}
			b.WriteString(".")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// times formats v/ref as "0.37x"; "-" when ref is not positive.
func times(v, ref float64) string {
	if !(ref > 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v/ref)
}
