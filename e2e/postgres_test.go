package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A throwaway PostgreSQL server for one chaos scenario, run inside the
// scenario's network namespace on 127.0.0.1:5432 (the namespace's own
// loopback: the host's server on its 127.0.0.1:5432 is a different socket
// and is never touched). "Postgres unreachable" means stopping this
// server. Binaries come from RAFTPACE_PG_BIN (a directory with initdb and
// pg_ctl) or, when that is unset, the newest /usr/lib/postgresql/*/bin.

// pgURL is how the agents in the namespace reach the throwaway server.
const pgURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// agentHasFlag reports whether `raftpace agent -h` lists --name.
func agentHasFlag(t *testing.T, name string) bool {
	t.Helper()
	agentHelpOnce.Do(func() {
		out, _ := exec.Command(binary, "agent", "-h").CombinedOutput()
		agentHelp = string(out)
	})
	return regexp.MustCompile(`(?m)^\s*--?` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(agentHelp)
}

var (
	agentHelpOnce sync.Once
	agentHelp     string
)

// needPostgresFlag skips a scenario that needs the agent's --postgres flag
// when this build has none.
func needPostgresFlag(t *testing.T) {
	t.Helper()
	if !agentHasFlag(t, "postgres") {
		t.Skip("waiting for --postgres: `raftpace agent -h` lists no --postgres flag in this build")
	}
}

// pgBinDir finds initdb and pg_ctl.
func pgBinDir() (string, error) {
	if d := os.Getenv("RAFTPACE_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err != nil {
			return "", fmt.Errorf("RAFTPACE_PG_BIN=%s: %w", d, err)
		}
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(found) == 0 {
		return "", fmt.Errorf("no PostgreSQL binaries: set RAFTPACE_PG_BIN to a directory with initdb and pg_ctl")
	}
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
	return filepath.Dir(found[0]), nil
}

// pgServer is a throwaway PostgreSQL server in a namespace.
type pgServer struct {
	t    *testing.T
	ns   *netns
	bin  string
	root string // owned by the server's user: data, socket, log
	user string
	up   bool
}

// startPostgres initialises and starts a server in ns; it is stopped and
// removed when the test ends. Without binaries the test is skipped, or
// fails when CI is set.
func startPostgres(t *testing.T, ns *netns) *pgServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("postgres: %v (CI is set: not skipping)", err)
		}
		t.Skipf("postgres: %v", err)
	}
	// initdb refuses to run as root: use the postgres system user, or
	// nobody where there is none.
	name := "postgres"
	u, err := user.Lookup(name)
	if err != nil {
		name = "nobody"
		if u, err = user.Lookup(name); err != nil {
			t.Fatalf("postgres: no postgres or nobody user to run the server as: %v", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Not under t.TempDir: its parents are root's 0700 directories.
	root, err := os.MkdirTemp("", "raftpace-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgServer{t: t, ns: ns, bin: bin, root: root, user: name}
	t.Cleanup(func() {
		p.stop()
		os.RemoveAll(root)
	})
	if err := os.Chown(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	p.run(false, "initdb", "-D", p.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	p.start()
	return p
}

func (p *pgServer) data() string { return filepath.Join(p.root, "data") }

// run runs a PostgreSQL binary as the server's user, in the namespace if
// inNS, and fails the test on error.
func (p *pgServer) run(inNS bool, prog string, args ...string) {
	p.t.Helper()
	argv := append([]string{"runuser", "-u", p.user, "--", filepath.Join(p.bin, prog)}, args...)
	if inNS {
		argv = append([]string{"ip", "netns", "exec", p.ns.name}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(cleanEnv(), "PGTZ=UTC", "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.root, "server.log"))
		p.t.Fatalf("postgres: %s: %v\n%s\nserver log:\n%s", strings.Join(argv, " "), err, out, log)
	}
}

// start starts the server (again) and waits until it accepts connections.
func (p *pgServer) start() {
	p.t.Helper()
	opts := "-c listen_addresses=127.0.0.1 -c port=5432 -c unix_socket_directories=" + p.root +
		" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
	p.run(true, "pg_ctl", "-D", p.data(), "-l", filepath.Join(p.root, "server.log"), "-o", opts, "-w", "-t", "30", "start")
	p.up = true
}

// stop stops the server at once (immediate mode: like a crash, clients
// see their connections drop).
func (p *pgServer) stop() {
	p.t.Helper()
	if !p.up {
		return
	}
	p.run(true, "pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop")
	p.up = false
}

// agentFlags are the flags that connect an agent to this server.
func (p *pgServer) agentFlags() []string {
	flags := []string{"--postgres", pgURL}
	if agentHasFlag(p.t, "postgres-schema") {
		flags = append(flags, "--postgres-schema", "raftpace_chaos")
	}
	return flags
}
