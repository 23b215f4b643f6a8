package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/node"
)

// GateConfig is the load on the refusal gate and the concurrency caps.
type GateConfig struct {
	// URLs are fetched (GET) in a loop through client.Transport: paced by
	// the URL's host:port as key, paused fleet-wide on 429/503, a slot per
	// request when the key has a cap. HTTPWorkers goroutines per URL.
	URLs        []string
	HTTPWorkers int
	// SlotGroups each get SlotWorkers goroutines that take one slot on
	// every key of the group at once, hold it between HoldMin and HoldMax
	// (random), release it, in a loop. Each slot has a TTL of SlotTTL.
	SlotGroups       [][]string
	SlotWorkers      int
	HoldMin, HoldMax time.Duration
	SlotTTL          time.Duration
	// SlotLog, if set, is a file each acquire and release is appended to:
	// "A unix_nanos node slot_id keys deadline_unix_nanos" and
	// "R unix_nanos node slot_id".
	SlotLog string
}

// Active reports whether there is any gate load to run.
func (g GateConfig) Active() bool { return len(g.URLs) > 0 || len(g.SlotGroups) > 0 }

// SlotKeys splits a slot group, KEY[,KEY...], and checks each key.
func SlotKeys(group string) ([]string, error) {
	keys := strings.Split(group, ",")
	for _, k := range keys {
		if err := fsm.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// StartGate starts the HTTP and slot load on n; the returned function
// waits for it to end (after ctx ends) and closes the slot log. An error
// opening the slot log is returned as the os package reports it.
func StartGate(ctx context.Context, n *node.Node, g GateConfig, log *slog.Logger) (wait func() error, err error) {
	var slotLog io.Writer
	var f *os.File
	if g.SlotLog != "" {
		f, err = os.OpenFile(g.SlotLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		slotLog = f
	}
	c := client.New(n)
	var wg sync.WaitGroup
	for _, u := range g.URLs {
		hc := &http.Client{Transport: client.Transport(nil, c, client.OnError(func(key string, err error) {
			log.Warn("recording a refusal failed", "key", key, "err", err)
		}))}
		for range g.HTTPWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				httpWorker(ctx, hc, u, log)
			}()
		}
	}
	var logMu sync.Mutex
	for _, keys := range g.SlotGroups {
		for range g.SlotWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.slotWorker(ctx, c, n.ID(), keys, slotLog, &logMu, log)
			}()
		}
	}
	return func() error {
		wg.Wait()
		if f != nil {
			return f.Close()
		}
		return nil
	}, nil
}

func httpWorker(ctx context.Context, hc *http.Client, u string, log *slog.Logger) {
	tl := throttledLog{logger: log, every: 5 * time.Second}
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			log.Error("load-http request", "err", err)
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				tl.log(slog.LevelWarn, "load-http", err)
				loop.Sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (g GateConfig) slotWorker(ctx context.Context, c *client.Client, nodeID string, keys []string, out io.Writer, mu *sync.Mutex, log *slog.Logger) {
	tl := throttledLog{logger: log, every: 5 * time.Second}
	write := func(line string) {
		if out == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(out, line); err != nil {
			tl.log(slog.LevelError, "slot-log", err)
		}
	}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := c.Acquire(actx, keys, g.SlotTTL)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, raftpace.ErrConcurrencyLimit) {
				tl.log(slog.LevelWarn, "load-slots", err)
				loop.Sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		s := h.Slot()
		write(fmt.Sprintf("A %d %s %s %s %d\n", time.Now().UnixNano(), nodeID, s.ID, strings.Join(s.Keys, ","), s.Deadline.UnixNano()))
		hold := g.HoldMin
		if d := g.HoldMax - g.HoldMin; d > 0 {
			hold += rand.N(d)
		}
		// Never hold past the slot's deadline: the cap is only promised
		// that long.
		hold = min(hold, time.Until(s.Deadline)-10*time.Millisecond)
		loop.Sleep(ctx, hold)
		write(fmt.Sprintf("R %d %s %s\n", time.Now().UnixNano(), nodeID, s.ID))
		h.Release()
	}
}
