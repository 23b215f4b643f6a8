package loadgen

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestSoloPacer(t *testing.T) {
	t.Parallel()
	p := &soloPacer{epoch: time.Now()}
	lim := fsm.Limit{Rate: 10, Burst: 3}
	// A burst of 3 goes at once, then one every 100ms.
	var waits []time.Duration
	for range 5 {
		waits = append(waits, p.reserve(lim))
	}
	for i, w := range waits[:3] {
		if w > 10*time.Millisecond {
			t.Errorf("burst event %d waits %v", i, w)
		}
	}
	if waits[3] < 50*time.Millisecond || waits[4] < waits[3]+90*time.Millisecond {
		t.Errorf("waits after the burst: %v", waits)
	}
}
