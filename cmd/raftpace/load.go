package main

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/bench"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/gcra"
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

// reserver grants reservations: *client.Client (raftpace), the solo pacer,
// and the bench's pacers (Postgres, Redis, x/time/rate, gubernator).
type reserver interface {
	ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error)
	Forfeit(client.Reservation)
}

const (
	unknownKeyRetry = 100 * time.Millisecond // while no limit is set
	limitPoll       = 10 * time.Millisecond  // local check for a key's limit before its load starts
	minErrorBackoff = 50 * time.Millisecond
	maxErrorBackoff = time.Second
)

// loadOptions are the load generator's settings beyond the keys.
type loadOptions struct {
	// rate, when positive, makes the load open-loop: arrivals at rate per
	// second per key, evenly spaced, handed to the key's workers through a
	// bounded queue; an arrival that finds the queue full is shed. Zero:
	// closed loop, each worker reserves again as soon as it has admitted.
	rate float64
	// maxWait is the longest wait an open-loop worker accepts; a longer
	// one is refused by the pacer (shed, nothing consumed).
	maxWait time.Duration
	// duration, when positive, stops each key's load that long after it
	// started (its limit known); zero runs until the context ends.
	duration time.Duration
	// grace is the use-by allowance of the solo pacer's slots.
	grace time.Duration
	// keyDone, if set, is called each time a key's load has ended (its
	// duration passed), from that key's goroutine.
	keyDone func(*loadRun)
}

// loadTarget is what the load runs against.
type loadTarget struct {
	res reserver
	// ready blocks until reservations may start (a leader is known) and
	// returns a description for the log; nil starts at once.
	ready func(ctx context.Context) (string, error)
	// limitKnown reports whether key has a limit yet; a key's load waits
	// (polling locally) until it has. nil: every key has one.
	limitKnown func(ctx context.Context, key string) bool
}

// startLoad runs the load of specs against n until ctx ends and returns a
// function that waits for every load goroutine to finish. Nothing starts
// before n knows a leader. In mode "solo" each key is paced by a local GCRA
// at its full replicated limit, without asking the leader: coordination
// turned off, for showing that a ceiling test can fail.
func startLoad(ctx context.Context, n loadNode, specs []loadSpec, mode string, rec recorder, log *slog.Logger) (wait func()) {
	r := runLoad(ctx, nodeTarget(n, mode, defaultUseGrace), specs, loadOptions{}, rec, log.With("load_mode", mode))
	return r.wait
}

// nodeTarget is the load target of an agent: the node through a client, or
// in mode "solo" a local pacer per key at the node's replicated limit.
func nodeTarget(n loadNode, mode string, grace time.Duration) loadTarget {
	t := loadTarget{
		res:   client.New(n),
		ready: n.WaitForLeader,
		limitKnown: func(ctx context.Context, key string) bool {
			_, err := n.Limit(ctx, key)
			return !errors.Is(err, raftpace.ErrUnknownKey)
		},
	}
	if mode == "solo" {
		t.res = &soloReserver{n: n, grace: grace, pacers: map[string]*soloPacer{}}
	}
	return t
}

// loadRun is a running load: per key, its workers and its counters.
type loadRun struct {
	wg   sync.WaitGroup
	done chan struct{} // closed when every key's load has ended
	keys []*keyLoad
}

// keyLoad is one key's load and what it measured.
type keyLoad struct {
	spec loadSpec
	// lat times the reservation calls (the paced sleep excluded): one
	// histogram per worker (up to maxLatShards, then shared), merged for
	// the report, so that timing does not make the workers contend.
	lat       []*bench.Histogram
	admitted  atomic.Uint64
	shed      atomic.Uint64 // refused by the pacer
	shedQueue atomic.Uint64 // arrivals that found the queue full
	forfeited atomic.Uint64
	errors    atomic.Uint64
	from, to  atomic.Int64 // unix ns
}

// runLoad starts the load of specs against t and returns at once.
func runLoad(ctx context.Context, t loadTarget, specs []loadSpec, o loadOptions, rec recorder, log *slog.Logger) *loadRun {
	r := &loadRun{done: make(chan struct{})}
	for _, s := range specs {
		k := &keyLoad{spec: s}
		for range min(s.concurrency, maxLatShards) {
			k.lat = append(k.lat, new(bench.Histogram))
		}
		r.keys = append(r.keys, k)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if t.ready != nil {
			log.Info("load: waiting for a leader")
			leader, err := t.ready(ctx)
			if err != nil {
				if ctx.Err() == nil {
					log.Error("load: no leader; load not started", "err", err)
				}
				return
			}
			log.Info("load: starting", "leader", leader)
		}
		for _, k := range r.keys {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				k.run(ctx, t, o, rec, log.With("key", k.spec.key))
				if o.keyDone != nil && ctx.Err() == nil {
					o.keyDone(r)
				}
			}()
		}
	}()
	go func() {
		r.wg.Wait()
		close(r.done)
	}()
	return r
}

// wait blocks until every load goroutine has ended (after ctx ends, or
// each key's duration has passed).
func (r *loadRun) wait() { <-r.done }

// report summarises the load per key.
func (r *loadRun) report(nodeID string) *bench.LoadReport {
	rep := &bench.LoadReport{Node: nodeID, PID: os.Getpid(), Keys: map[string]*bench.KeyLoad{}}
	for _, k := range r.keys {
		kl := &bench.KeyLoad{
			Concurrency: k.spec.concurrency,
			Admitted:    k.admitted.Load(),
			ShedQueue:   k.shedQueue.Load(),
			Forfeited:   k.forfeited.Load(),
			Errors:      k.errors.Load(),
			From:        k.from.Load(),
			To:          k.to.Load(),
		}
		kl.Shed = kl.ShedQueue + k.shed.Load()
		var lat bench.Histogram
		for _, h := range k.lat {
			lat.Merge(h)
		}
		kl.SetLatency(&lat)
		rep.Keys[k.spec.key] = kl
	}
	return rep
}

// run is one key's load: wait for its limit, then run its workers until
// ctx ends or the duration has passed.
func (k *keyLoad) run(ctx context.Context, t loadTarget, o loadOptions, rec recorder, log *slog.Logger) {
	if t.limitKnown != nil && !t.limitKnown(ctx, k.spec.key) {
		log.Info("load: no limit set for the key yet; waiting")
		for !t.limitKnown(ctx, k.spec.key) {
			if !sleep(ctx, limitPoll) {
				return
			}
		}
	}
	kctx, cancel := ctx, context.CancelFunc(func() {})
	if o.duration > 0 {
		kctx, cancel = context.WithTimeout(ctx, o.duration)
	}
	defer cancel()
	k.from.Store(time.Now().UnixNano())
	errs := &throttledLog{logger: log, every: time.Second}
	var wg sync.WaitGroup
	var queue chan struct{}
	if o.rate > 0 {
		// Room for the workers plus 2ms of arrivals (the generator wakes
		// about once a millisecond at high rates).
		queue = make(chan struct{}, k.spec.concurrency+int(math.Ceil(o.rate*0.002)))
		wg.Go(func() { arrivals(kctx, o.rate, queue, &k.shedQueue) })
	}
	for i := range k.spec.concurrency {
		w := &loadWorker{key: k.spec.key, res: t.res, rec: rec, k: k, lat: k.lat[i%len(k.lat)], errs: errs}
		wg.Go(func() {
			if queue != nil {
				w.open(kctx, queue, o.maxWait)
			} else {
				w.closed(kctx)
			}
		})
	}
	<-kctx.Done()
	k.to.Store(time.Now().UnixNano())
	wg.Wait()
	log.Info("load: stopped", "admitted", k.admitted.Load(), "shed", k.shed.Load()+k.shedQueue.Load())
}

// arrivals offers rate arrivals per second on queue, evenly spaced from
// now, until ctx ends, then closes queue. At high rates it wakes about once
// a millisecond and offers the arrivals due since; an arrival that finds
// the queue full is counted in shed.
func arrivals(ctx context.Context, rate float64, queue chan<- struct{}, shed *atomic.Uint64) {
	defer close(queue)
	start := time.Now()
	var offered int64
	for {
		due := int64(time.Since(start).Seconds()*rate) + 1 // the first at start
		for ; offered < due; offered++ {
			select {
			case queue <- struct{}{}:
			default:
				shed.Add(1)
			}
		}
		next := start.Add(time.Duration(float64(offered) / rate * float64(time.Second)))
		if !sleep(ctx, max(time.Until(next), 500*time.Microsecond)) {
			return
		}
	}
}

// maxLatShards bounds the latency histograms of a key (21 KB each).
const maxLatShards = 64

// loadWorker is one load goroutine's view of its key.
type loadWorker struct {
	key  string
	res  reserver
	rec  recorder
	k    *keyLoad
	lat  *bench.Histogram
	errs *throttledLog
}

// take reserves one event and sleeps until its slot, like client.Wait,
// but times the reservation call alone. Each attempt asks with the time
// left until deadline as its maximum wait; a slot woken for after its
// use-by is forfeited and asked for again.
func (w *loadWorker) take(ctx context.Context, deadline time.Time) error {
	for {
		maxWait := time.Until(deadline)
		if maxWait < 0 {
			return &client.LimitExceededError{Key: w.key, MaxWait: maxWait}
		}
		t0 := time.Now()
		r, err := w.res.ReserveN(ctx, w.key, 1, maxWait)
		took := time.Since(t0)
		if err != nil {
			if errors.Is(err, raftpace.ErrLimitExceeded) {
				w.lat.Record(took)
			}
			return err
		}
		w.lat.Record(took)
		if d := time.Until(r.At); d > 0 && !sleep(ctx, d) {
			w.res.Forfeit(r)
			return ctx.Err()
		}
		if !time.Now().After(r.UseBy) {
			return nil
		}
		w.res.Forfeit(r)
		w.k.forfeited.Add(1)
	}
}

// admit records an admitted event: it happens now.
func (w *loadWorker) admit() {
	w.k.admitted.Add(1)
	if err := w.rec.Record(w.key, time.Now()); err != nil {
		w.errs.log(slog.LevelError, "load: recording the event failed", err)
	}
}

// closed is a closed-loop worker: admit, then reserve again at once (with
// no practical maximum wait, as Wait without a deadline).
func (w *loadWorker) closed(ctx context.Context) {
	backoff := minErrorBackoff
	for ctx.Err() == nil {
		err := w.take(ctx, time.Now().Add(noDeadline))
		if err == nil {
			w.admit()
			backoff = minErrorBackoff
			continue
		}
		if !w.failed(ctx, err, &backoff) {
			return
		}
	}
}

// open is an open-loop worker: each arrival is reserved with maxWait and
// admitted, or shed when the wait would pass maxWait.
func (w *loadWorker) open(ctx context.Context, queue <-chan struct{}, maxWait time.Duration) {
	backoff := minErrorBackoff
	for range queue {
		if ctx.Err() != nil {
			return
		}
		err := w.take(ctx, time.Now().Add(maxWait))
		switch {
		case err == nil:
			w.admit()
			backoff = minErrorBackoff
		case errors.Is(err, raftpace.ErrLimitExceeded):
			w.k.shed.Add(1)
		default:
			if !w.failed(ctx, err, &backoff) {
				return
			}
		}
	}
}

// failed handles a failed reservation: it logs (throttled), sleeps a
// backoff and reports whether the worker should go on.
func (w *loadWorker) failed(ctx context.Context, err error, backoff *time.Duration) bool {
	switch {
	case ctx.Err() != nil:
		return false
	case errors.Is(err, raftpace.ErrClosed):
		return false
	case errors.Is(err, raftpace.ErrUnknownKey):
		w.errs.log(slog.LevelInfo, "load: no limit set for the key yet; retrying", nil)
		return sleep(ctx, unknownKeyRetry)
	}
	w.k.errors.Add(1)
	w.errs.log(slog.LevelWarn, "load: reservation failed; retrying", err)
	ok := sleep(ctx, *backoff)
	*backoff = min(2**backoff, maxErrorBackoff)
	return ok
}

// defaultUseGrace is node.Config's default UseGrace.
const defaultUseGrace = 50 * time.Millisecond

// noDeadline is the maximum wait of a closed-loop reservation (client.Wait's
// without a context deadline).
const noDeadline = 10 * time.Minute

// soloReserver is --load-mode solo: each key paced by a local GCRA at its
// replicated limit, never asking the leader.
type soloReserver struct {
	n     loadNode
	grace time.Duration

	mu     sync.Mutex
	pacers map[string]*soloPacer
}

func (s *soloReserver) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	lim, err := s.n.Limit(ctx, key)
	if err != nil {
		return client.Reservation{}, err
	}
	s.mu.Lock()
	p := s.pacers[key]
	if p == nil {
		p = &soloPacer{epoch: time.Now()}
		s.pacers[key] = p
	}
	s.mu.Unlock()
	now := time.Now()
	d, ok := p.reserveWithin(lim, n, maxWait)
	if !ok {
		return client.Reservation{}, &client.LimitExceededError{Key: key, Wait: d, MaxWait: maxWait}
	}
	at := now.Add(d)
	return client.Reservation{At: at, UseBy: at.Add(s.grace)}, nil
}

func (s *soloReserver) Forfeit(client.Reservation) {}

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
	d, _ := p.reserveWithin(lim, 1, noDeadline)
	return d
}

// reserveWithin takes n slots if the wait for them is at most maxWait and
// returns the wait; otherwise it takes nothing and returns the wait with
// false.
func (p *soloPacer) reserveWithin(lim fsm.Limit, n int, maxWait time.Duration) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim != p.lim {
		p.lim = lim
		p.params = gcra.NewParams(int64(lim.Interval()), lim.Burst)
	}
	now := int64(time.Since(p.epoch))
	start, tat, err := gcra.Reserve(p.tat, p.params, now, n)
	if err != nil { // n above the burst
		return maxWait + 1, false
	}
	if d := time.Duration(start - now); d > maxWait {
		return d, false
	}
	p.tat = tat
	return time.Duration(start - now), true
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
