package e2e

import "testing"

// Three Ruby worker processes (testdata/rbworker.rb), one beside each of
// three agents, each calling Raftpace::Client#wait through its agent's
// unix socket, share one limit of 30/s burst 3: `raftpace check` on their
// merged timelines finds no window of 0.5, 1, 2 or 5 s over
// R*W + B + R*delta, and together they admit at least 90% of R over the
// run.
func TestE2E_RubyWorkersShareOneLimit(t *testing.T) {
	t.Parallel()
	testWorkersShareOneLimit(t, ruby, 1)
}

// The non-vacuity twin: the same three Ruby workers each pacing alone at R
// with a local GCRA (no agent) admit about 3 x R, and the same check must
// fail.
func TestE2E_RubyWorkersPacingAloneBreakTheLimit(t *testing.T) {
	t.Parallel()
	testWorkersPacingAloneBreakTheLimit(t, ruby, 3)
}
