package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
	"github.com/raftpace/raftpace/node"
)

// recorder receives every admitted event. *timeline.Writer is one.
type recorder interface {
	Record(key string, at time.Time) error
}

// countOnly records nothing (load without --timeline).
type countOnly struct{}

func (countOnly) Record(string, time.Time) error { return nil }

// loadNode is what the load generator needs from a node.
type loadNode interface {
	client.Backend
	WaitForLeader(ctx context.Context) (string, error)
}

const (
	unknownKeyRetry = 100 * time.Millisecond // while no limit is set
	minErrorBackoff = 50 * time.Millisecond
	maxErrorBackoff = time.Second
)

// startLoad runs the load of specs against n until ctx ends and returns a
// function that waits for every load goroutine to finish. Nothing starts
// before n knows a leader. In mode "solo" each key is paced by a local GCRA
// at its full replicated limit, without asking the leader: coordination
// turned off, for showing that a ceiling test can fail.
func startLoad(ctx context.Context, n loadNode, specs []loadSpec, mode string, rec recorder, log *slog.Logger) (wait func()) {
	log = log.With("load_mode", mode)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		log.Info("load: waiting for a leader")
		leader, err := n.WaitForLeader(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("load: no leader; load not started", "err", err)
			}
			return
		}
		log.Info("load: starting", "leader", leader)
		c := client.New(n)
		var counts []*atomic.Uint64
		for _, s := range specs {
			count := new(atomic.Uint64)
			counts = append(counts, count)
			w := &loadWorker{key: s.key, c: c, n: n, rec: rec, count: count,
				errs: &throttledLog{logger: log.With("key", s.key), every: time.Second}}
			if mode == "solo" {
				w.solo = &soloPacer{epoch: time.Now()}
			}
			for range s.concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.run(ctx)
				}()
			}
		}
		<-ctx.Done()
		for i, s := range specs {
			log.Info("load: stopped", "key", s.key, "admitted", counts[i].Load())
		}
	}()
	return wg.Wait
}

// loadWorker is the loop of one load goroutine; the goroutines of a key
// share one loadWorker.
type loadWorker struct {
	key   string
	c     *client.Client
	n     loadNode
	rec   recorder
	solo  *soloPacer // nil: ask the cluster
	count *atomic.Uint64
	errs  *throttledLog
}

func (w *loadWorker) run(ctx context.Context) {
	backoff := minErrorBackoff
	for ctx.Err() == nil {
		var err error
		if w.solo != nil {
			err = w.waitSolo(ctx)
		} else {
			err = w.c.Wait(ctx, w.key)
		}
		if err == nil {
			// Record at once: the event happens now.
			at := time.Now()
			w.count.Add(1)
			if rerr := w.rec.Record(w.key, at); rerr != nil {
				w.errs.log(slog.LevelError, "load: recording the event failed", rerr)
			}
			backoff = minErrorBackoff
			continue
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, node.ErrClosed):
			return
		case errors.Is(err, node.ErrUnknownKey):
			w.errs.log(slog.LevelInfo, "load: no limit set for the key yet; retrying", nil)
			sleep(ctx, unknownKeyRetry)
		default:
			w.errs.log(slog.LevelWarn, "load: wait failed; retrying", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxErrorBackoff)
		}
	}
}

// waitSolo paces the key locally at its replicated limit.
func (w *loadWorker) waitSolo(ctx context.Context) error {
	lim, err := w.n.Limit(ctx, w.key)
	if err != nil {
		return err
	}
	d := w.solo.reserve(lim)
	if d <= 0 {
		return nil
	}
	if !sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// soloPacer is a local GCRA on this process's monotonic clock, shared by
// the goroutines of one key.
type soloPacer struct {
	epoch time.Time

	mu     sync.Mutex
	lim    fsm.Limit
	params gcra.Params
	tat    int64
}

// reserve takes the next slot and returns how long to wait for it.
func (p *soloPacer) reserve(lim fsm.Limit) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim != p.lim {
		p.lim = lim
		p.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
	}
	now := int64(time.Since(p.epoch))
	start, tat, err := gcra.Reserve(p.tat, p.params, now, 1)
	if err != nil { // cannot happen for n = 1 and burst >= 1
		return unknownKeyRetry
	}
	p.tat = tat
	return time.Duration(start - now)
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// throttledLog logs at most once per period and counts what it dropped.
type throttledLog struct {
	logger *slog.Logger
	every  time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (t *throttledLog) log(level slog.Level, msg string, err error) {
	t.mu.Lock()
	now := time.Now()
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		t.suppressed++
		t.mu.Unlock()
		return
	}
	t.last = now
	suppressed := t.suppressed
	t.suppressed = 0
	t.mu.Unlock()
	args := []any{}
	if err != nil {
		args = append(args, "err", err)
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	t.logger.Log(context.Background(), level, msg, args...)
}
