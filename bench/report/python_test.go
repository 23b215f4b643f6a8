package report

import (
	"encoding/json"
	"strings"
	"testing"
)

// cannedPython is a document of clients/python/bench.py --json (a real
// run's, on 2 CPUs).
const cannedPython = `{
 "python": "3.11.2", "cpus": 2, "loadavg": [2.15, 1.74, 2.27], "n": 1000,
 "latency": [
  {"id": "socket", "label": "agent socket: client.reserve", "p50_s": 0.000119276, "p99_s": 0.001828746, "ops_per_s": 6142.35},
  {"id": "postgres", "label": "postgres: upsert-and-return", "p50_s": 0.00032673, "p99_s": 0.002155044, "ops_per_s": 2434.91},
  {"id": "redis", "label": "redis: GCRA EVALSHA", "p50_s": 5.9954e-05, "p99_s": 0.000338742, "ops_per_s": 12517.27}
 ],
 "throughput": [
  {"id": "client", "label": "raftpace.Client", "procs": 4, "secs": 2.0, "per_s": 18258.0, "agent_cpu_s": 1.6, "client_cpu_s": 1.47},
  {"id": "raw", "label": "raw socket", "procs": 4, "secs": 2.0, "per_s": 23534.0, "agent_cpu_s": 1.78, "client_cpu_s": 1.14}
 ],
 "target_per_s": 20000
}`

func TestParsePython(t *testing.T) {
	t.Parallel()
	p, err := ParsePython([]byte(cannedPython))
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != "3.11.2" || p.CPUs != 2 || p.N != 1000 || len(p.Latency) != 3 || len(p.Throughput) != 2 || p.TargetPerSec != 20000 {
		t.Fatalf("parsed %+v", p)
	}
	if sk := p.latency("socket"); sk.P50 != 0.000119276 || sk.PerSecond != 6142.35 {
		t.Errorf("socket %+v", sk)
	}
	if tp := p.throughput("raw"); tp.Procs != 4 || tp.PerSecond != 23534 || tp.AgentCPU != 1.78 {
		t.Errorf("raw %+v", tp)
	}
	if p.TargetMet() {
		t.Error("18,258/s met the 20,000/s target")
	}
	if got, want := p.Summary(), "socket p50 119 µs vs Postgres 327 µs, 4 Python processes 18k/s"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}

	bad := []struct{ doc, want string }{
		{`not json`, "invalid character"},
		{`{"latency": [{"id": "socket", "p50_s": 1}], "throughput": []}`, `no "postgres" latency`},
		{`{"latency": [{"id": "socket"}, {"id": "postgres"}]}`, `no "client" throughput`},
		{`{"latency": [{"id": "socket", "p50_s": -1}, {"id": "postgres"}], "throughput": [{"id": "client"}]}`, `latency "socket": a figure is negative`},
	}
	for _, tc := range bad {
		if _, err := ParsePython([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePython(%s): %v, want an error with %q", tc.doc, err, tc.want)
		}
	}
	// No target in the document: the default.
	p, err = ParsePython([]byte(`{"latency": [{"id": "socket"}, {"id": "postgres"}], "throughput": [{"id": "client", "per_s": 25000}]}`))
	if err != nil || p.TargetPerSec != DefaultPythonTarget || !p.TargetMet() {
		t.Errorf("%+v, %v", p, err)
	}
}

func TestMarkdown_Python(t *testing.T) {
	t.Parallel()
	p, err := ParsePython([]byte(cannedPython))
	if err != nil {
		t.Fatal(err)
	}
	r := New(true)
	r.Python = p
	r.Finish()
	md := r.Markdown()
	for _, want := range []string{
		"## " + PythonTitle + "\n",
		"One Python 3.11.2 process, 1,000 reservations per path",
		"| path | p50 | p99 | ops/s | p50 vs Postgres | p99 vs Postgres | ops/s vs Postgres |",
		"| raftpace agent's unix socket: client.reserve (Python client) | 119 µs | 1.8 ms | 6.1k | 0.37x | 0.85x | 2.52x |",
		"| Postgres pacer: upsert-and-return statement (psycopg2) | 327 µs | 2.2 ms | 2.4k | 1.00x | 1.00x | 1.00x |",
		"| Redis GCRA Lua: EVALSHA (redis-py) | 60 µs | 339 µs | 13k | 0.18x | 0.16x | 5.14x |",
		"- Agent throughput, 4 Python processes x 2 s of reserve through the socket, the Python client (raftpace.Client): **18,258 reservations/s**; target >= 20,000/s on 2 cores: **not met** (2 CPUs here). CPU: agent 80% of a core, clients 74%; per reservation agent 44 µs, client 40 µs.",
		"minimal raw-socket clients (a prebuilt request, the answer read to its Content-Length: the agent's ceiling): **23,534 reservations/s**. CPU:",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	// The section comes before the targets; the raw line has no target.
	if strings.Index(md, PythonTitle) > strings.Index(md, "## Performance targets") {
		t.Error("the Python section is after the targets")
	}
	if strings.Count(md, "target >= 20,000/s") != 1 {
		t.Errorf("the target is marked %d times", strings.Count(md, "target >= 20,000/s"))
	}

	p.Throughput[0].PerSecond = 21000
	if md := r.Markdown(); !strings.Contains(md, "**21,000 reservations/s**; target >= 20,000/s on 2 cores: **met**") {
		t.Errorf("Markdown:\n%s", md)
	}

	// The report's JSON carries the figures under "python".
	js, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || back.Python == nil || back.Python.latency("redis").P99 != 0.000338742 {
		t.Errorf("JSON round trip: %v %+v", err, back.Python)
	}

	// Skipped: the reason, like any other approach's.
	r = New(true)
	r.Skipped = append(r.Skipped, Skip{Approach: "python", Reason: "/usr/bin/python3 lacks psycopg2 (Debian: python3-psycopg2)"})
	md = r.Markdown()
	if strings.Contains(md, PythonTitle) || !strings.Contains(md, "- python: skipped: /usr/bin/python3 lacks psycopg2") {
		t.Errorf("Markdown:\n%s", md)
	}
}
