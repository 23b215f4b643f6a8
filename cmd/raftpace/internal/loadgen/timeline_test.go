package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// The buffered timeline appends in batches and at Close, in the timeline
// format, and refuses records after Close.
func TestBufferedTimeline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "n1.timeline")
	c := Config{Timeline: path, TimelineBuffer: true}
	w, err := c.OpenTimeline("n1")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 5)
	for i := range 1000 {
		if err := w.Record("k", at.Add(time.Duration(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Within a few flush periods the events are in the file.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Count(string(b), "\n") == 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the file holds %d lines", strings.Count(string(b), "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.Record("k", at.Add(time.Hour))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Record("k", at); err == nil {
		t.Error("Record after Close succeeded")
	}
	events, err := timeline.ParseFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1001 || events[0].At != at.UnixNano() || events[0].Node != "n1" || events[1000].At != at.Add(time.Hour).UnixNano() {
		t.Errorf("%d events, first %+v", len(events), events[0])
	}
	// A bad node id is refused at open, as by timeline.NewWriter.
	if _, err := c.OpenTimeline("bad id"); err == nil {
		t.Error("node id with a space accepted")
	}
}
