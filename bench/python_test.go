package bench

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/raftpace/raftpace/bench/report"
)

// Without its interpreter the python approach is skipped with the reason,
// never left out silently.
func TestRun_PythonSkipped(t *testing.T) {
	t.Parallel()
	if !IsApproach("python") {
		t.Fatal("python is not an approach")
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Python: filepath.Join(t.TempDir(), "python3")}, "no Python interpreter"},
		{Config{Python: "/bin/sh", PythonBench: filepath.Join(t.TempDir(), "bench.py")}, "no bench.py"},
	} {
		tc.cfg.Binary, tc.cfg.Only, tc.cfg.Quick, tc.cfg.WorkDir = "raftpace", []string{"python"}, true, t.TempDir()
		rep, err := Run(t.Context(), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(rep.Skipped, func(s report.Skip) bool { return s.Approach == "python" })
		if i < 0 || !strings.Contains(rep.Skipped[i].Reason, tc.want) || rep.Python != nil || rep.Failed() {
			t.Errorf("%+v: skipped %+v, python %v, failures %v; want a skip with %q", tc.cfg, rep.Skipped, rep.Python, rep.Failures, tc.want)
		}
		if md := rep.Markdown(); !strings.Contains(md, "- python: skipped: ") {
			t.Errorf("Markdown:\n%s", md)
		}
	}
}
