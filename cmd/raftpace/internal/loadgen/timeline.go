package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/raftpace/raftpace/internal/timeline"
)

// timelineFlushEvery is how often a bufferedTimeline appends its events.
const timelineFlushEvery = 50 * time.Millisecond

// bufferedTimeline is Config.TimelineBuffer (the agent's
// --timeline-buffer): events kept in memory and appended to the file (one
// write per batch, O_APPEND) every flush period and at Close. At 100,000
// events/s one write(2) per event costs a benchmark's processes a
// noticeable share of two cores; this costs a process that is SIGKILLed
// its last period of events, which is why it is opt-in and the default
// Writer stays unbuffered. Safe for concurrent use.
type bufferedTimeline struct {
	path string
	node string
	f    *os.File
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	events []timeline.Event
	closed bool
	err    error // the first failed flush; later Records return it
}

func newBufferedTimeline(path, nodeID string, every time.Duration) (*bufferedTimeline, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	b := &bufferedTimeline{path: path, node: nodeID, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go b.flusher(every)
	return b, nil
}

func (b *bufferedTimeline) flusher(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.flush()
		case <-b.stop:
			return
		}
	}
}

// Record keeps the event for the next flush.
func (b *bufferedTimeline) Record(key string, at time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("timeline: record %q: %w", key, timeline.ErrClosed)
	}
	if b.err != nil {
		return b.err
	}
	b.events = append(b.events, timeline.Event{At: at.UnixNano(), Node: b.node, Key: key})
	return nil
}

// flush appends the kept events in one write. WriteEvents validates them
// first, so a bad event writes nothing of its batch.
func (b *bufferedTimeline) flush() error {
	b.mu.Lock()
	events := b.events
	b.events = make([]timeline.Event, 0, cap(events))
	b.mu.Unlock()
	if len(events) == 0 {
		return nil
	}
	var buf bytes.Buffer
	err := timeline.WriteEvents(&buf, events)
	if err == nil {
		_, err = b.f.Write(buf.Bytes())
	}
	if err != nil {
		err = fmt.Errorf("timeline: %s: %w", b.path, err)
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return err
}

// Close flushes what is left and closes the file. It is idempotent.
func (b *bufferedTimeline) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	err := b.flush()
	if cerr := b.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("timeline: close %s: %w", b.path, cerr)
	}
	return err
}
