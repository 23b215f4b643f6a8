package loadgen

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace/bench"
)

// A thousand keys that end at once are all in the report when the last
// KeyDone returns, written by far fewer than a thousand writes (each key
// waited for every earlier key's write of the whole report before).
func TestKeyDone_ReportCoalescesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.json")
	c := Config{Report: path, Duration: time.Second}
	o := c.Options(0, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	const n = 1000
	r := &Run{}
	for i := range n {
		r.keys = append(r.keys, &keyLoad{spec: Spec{Key: "k" + strconv.Itoa(i), Concurrency: 1}})
	}
	// One write of the whole report, timed here, is the unit: a
	// coalescing writer needs a few, one write per key a thousand.
	one := time.Now()
	if err := c.WriteReport(r, "n1"); err != nil {
		t.Fatal(err)
	}
	unit := time.Since(one)
	var wg sync.WaitGroup
	start := time.Now()
	for _, k := range r.keys {
		wg.Go(func() {
			k.to.Store(time.Now().UnixNano()) // this key's load ended
			o.KeyDone(r)
		})
	}
	wg.Wait()
	took := time.Since(start)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.LoadReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, kl := range rep.Keys {
		if kl.To != 0 {
			ended++
		}
	}
	if ended != n {
		t.Fatalf("the report after the last KeyDone shows %d of %d keys ended", ended, n)
	}
	t.Logf("%d keys ended at once: report complete %v after, one write takes %v", n, took.Round(time.Millisecond), unit)
	if took > 200*unit {
		t.Errorf("the report took %v, %.0f writes' time: keys' writes were not coalesced", took, float64(took)/float64(unit))
	}
}
