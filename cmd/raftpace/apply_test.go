package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// limit apply, from the real binary against a real agent: a dry run
// changes nothing, a run sets only what differs and says so, a second run
// has nothing to do, a file with a mistake sets nothing, and a thousand
// keys go in one command.
func TestBinary_LimitApply(t *testing.T) {
	run := operatorAgainstAgent(t)
	file := func(doc string) string {
		p := filepath.Join(t.TempDir(), "policy.json")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	contains := func(what, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, got)
			}
		}
	}

	run(0, "limit", "set", "a", "--rate", "1")
	run(0, "limit", "set", "kept", "--rate", "3")
	pf := file(`{"limits":{"a":{"rate":5,"burst":2},"tenant:*":{"rate":1}},"caps":{"api":4}}`)

	out, _ := run(0, "limit", "apply", pf, "--dry-run")
	contains("dry run", out, "limit a: 1/s burst 1 -> 5/s burst 2\n", "limit tenant:*: 1/s burst 1 (new)\n", "cap api: 4 (new)\n",
		"dry run: would set 3 keys; 0 already as in the file; 1 not in the file left as they are; nothing was sent")
	if out, _ := run(0, "limit", "get", "a"); !strings.Contains(out, "a    1/s   1") {
		t.Errorf("a dry run changed a:\n%s", out)
	}

	out, _ = run(0, "limit", "apply", pf)
	contains("apply", out, "limit a: 1/s burst 1 -> 5/s burst 2\n", "set 3 of 3 keys; 0 already as in the file; 1 not in the file left as they are")
	out, _ = run(0, "limit", "list")
	contains("limits after apply", out, "a         5/s   2", "kept      3/s   1", "tenant:*  1/s   1")
	out, _ = run(0, "slots", "list")
	contains("caps after apply", out, "api  4")

	out, _ = run(0, "limit", "apply", pf)
	if out != "nothing to set; 3 already as in the file; 1 not in the file left as they are\n" {
		t.Errorf("a second apply:\n%s", out)
	}

	// Every problem of the file at once, and nothing set.
	_, errOut := run(2, "limit", "apply", file(`{"limits":{"fine":{"rate":5},"a b":{"rate":5},"slow":{"rate":1e-9}},"caps":{"x":0}}`))
	contains("a bad file", errOut, `invalid key "a b"`, `limit "slow": rate 1e-09/s: below the minimum`, `cap "x": 0 must be 1..`)
	if out, _ := run(0, "limit", "list"); strings.Contains(out, "fine") {
		t.Errorf("a file with mistakes set a key:\n%s", out)
	}
	run(2, "limit", "apply", filepath.Join(t.TempDir(), "missing.json"))

	// A thousand keys in one command.
	var b strings.Builder
	b.WriteString(`{"limits":{`)
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"tenant-%04d":{"rate":1}`, i)
	}
	b.WriteString("}}")
	start := time.Now()
	out, _ = run(0, "limit", "apply", file(b.String()))
	t.Logf("limit apply of 1,000 new keys: %v", time.Since(start).Round(time.Millisecond))
	contains("1,000 keys", out, "set 1000 of 1000 keys; 0 already as in the file; 4 not in the file left as they are") // a, kept, tenant:*, cap api
	out, _ = run(0, "limit", "list")
	if n := strings.Count(out, "tenant-"); n != 1000 {
		t.Errorf("%d tenant keys listed after applying 1,000", n)
	}
}

// A limit in dry run, from the real binary: limit set --mode dry-run says
// so, get, list and --json show it, a policy file's mode moves it to
// enforce (and shows the change), and a mistyped mode sets nothing.
func TestBinary_LimitDryRun(t *testing.T) {
	run := operatorAgainstAgent(t)
	if out, _ := run(0, "limit", "set", "d", "--rate", "2", "--mode", "dry-run"); out != "d: rate 2/s, burst 1, dry run: admits everything, counts what it would hold back\n" {
		t.Errorf("limit set --mode dry-run:\n%s", out)
	}
	if out, _ := run(0, "limit", "get", "d", "--json"); strings.Join(strings.Fields(out), "") != `{"key":"d","rate":2,"burst":1,"dry_run":true}` {
		t.Errorf("limit get --json:\n%s", out)
	}
	if out, _ := run(0, "limit", "list"); !strings.Contains(out, "d    2/s (dry run)  1") {
		t.Errorf("limit list:\n%s", out)
	}
	_, errOut := run(2, "limit", "set", "e", "--rate", "2", "--mode", "dryrun")
	if !strings.Contains(errOut, `--mode "dryrun": must be enforce or dry-run`) {
		t.Errorf("a mistyped mode:\n%s", errOut)
	}
	run(1, "limit", "get", "e") // nothing was set

	p := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(p, []byte(`{"limits":{"d":{"rate":2,"mode":"enforce"},"n":{"rate":3,"mode":"dry-run"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := run(0, "limit", "apply", p)
	for _, want := range []string{"limit d: 2/s burst 1 (dry run) -> 2/s burst 1\n", "limit n: 3/s burst 1 (dry run) (new)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("limit apply lacks %q:\n%s", want, out)
		}
	}
	if out, _ := run(0, "limit", "get", "d", "--json"); strings.Contains(out, "dry_run") {
		t.Errorf("after applying mode enforce, d is still in dry run:\n%s", out)
	}
	if err := os.WriteFile(p, []byte(`{"limits":{"d":{"rate":2,"mode":"observe"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut := run(2, "limit", "apply", p); !strings.Contains(errOut, `limit "d": mode "observe": must be enforce or dry-run`) {
		t.Errorf("a bad mode in a policy file:\n%s", errOut)
	}
}

// A limit with a quota, set by the command line and by a policy file, read
// back, and what is left of it read by limit remaining.
func TestBinary_LimitQuota(t *testing.T) {
	run := operatorAgainstAgent(t)
	if out, _ := run(0, "limit", "set", "q", "--rate", "2", "--quota", "5/hour"); out != "q: rate 2/s, burst 1, quota 5/hour (UTC windows)\n" {
		t.Errorf("limit set --quota:\n%s", out)
	}
	if out, _ := run(0, "limit", "get", "q", "--json"); strings.Join(strings.Fields(out), "") != `{"key":"q","rate":2,"burst":1,"quota":"5/hour"}` {
		t.Errorf("limit get --json:\n%s", out)
	}
	if out, _ := run(0, "limit", "list"); !strings.Contains(out, "quota 5/hour (UTC)") {
		t.Errorf("limit list:\n%s", out)
	}
	out, _ := run(0, "limit", "remaining", "q")
	if !strings.Contains(out, "q: 1 of a burst of 1 at once") || !strings.Contains(out, "quota 5/hour: 0 used, 5 left in [") {
		t.Errorf("limit remaining:\n%s", out)
	}
	p := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(p, []byte(`{"limits":{"q":{"rate":2,"quota":"7/day"},"r":{"rate":1,"quota":"7/fortnight"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut := run(2, "limit", "apply", p); !strings.Contains(errOut, `limit "r": quota "7/fortnight": period "fortnight"`) {
		t.Errorf("a bad quota in a policy file:\n%s", errOut)
	}
	if err := os.WriteFile(p, []byte(`{"limits":{"q":{"rate":2,"quota":"7/day"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(0, "limit", "apply", p); !strings.Contains(out, "limit q: 2/s burst 1 quota 5/hour -> 2/s burst 1 quota 7/day\n") {
		t.Errorf("limit apply:\n%s", out)
	}
	if out, _ := run(0, "limit", "remaining", "q", "--json"); !strings.Contains(out, `"quota": "7/day"`) || !strings.Contains(out, `"left": 7`) {
		t.Errorf("limit remaining --json:\n%s", out)
	}
}

// operatorAgainstAgent starts the built binary as an agent and returns a
// function that runs an operator command of the binary against it
// (--addr added), failing the test unless it exits wantCode.
func operatorAgainstAgent(t *testing.T) func(wantCode int, args ...string) (stdout, stderr string) {
	bin := buildBinary(t)
	a := startBinAgent(t, bin, t.TempDir())
	if a.info.HTTPAddr == "" {
		t.Fatalf("agent did not start:\n%s", a.stderr)
	}
	return func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		stdout, stderr, code := runBinary(t, bin, append(args, "--addr", a.info.HTTPAddr)...)
		if code != wantCode {
			t.Fatalf("raftpace %q: exit %d, want %d:\n%s%s", args, code, wantCode, stdout, stderr)
		}
		return stdout, stderr
	}
}
