// Package loadgen is the load generator of raftpace's agent, demo and
// bench worker: goroutines that reserve events for keys in a loop (closed
// loop, or open loop at a given arrival rate), sleep until each event's
// slot and record it (in a timeline file, or only counted), measuring the
// latency of every reservation call; and, for the refusal gate and the
// concurrency caps, goroutines that GET URLs through client.Transport or
// hold slots. It promises that Start and StartGate return at once and that
// their wait functions return only after every goroutine they started has
// ended; every event a Recorder receives was admitted by the pacer it ran
// against. It knows nothing of flags: its callers name them in messages.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/bench"
	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/internal/loop"
)

// Recorder receives every admitted event. *timeline.Writer is one.
type Recorder interface {
	Record(key string, at time.Time) error
}

// CountOnly records nothing (a load without a timeline).
type CountOnly struct{}

func (CountOnly) Record(string, time.Time) error { return nil }

// Node is what the load generator needs from a node.
type Node interface {
	client.Backend
	WaitForLeader(ctx context.Context) (string, error)
}

// Reserver grants reservations: *client.Client (raftpace), the solo pacer,
// and the bench's pacers (Postgres, Redis, x/time/rate, gubernator).
type Reserver interface {
	ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error)
	Forfeit(client.Reservation)
}

// AllReserver grants one reservation over several keys (Options.With):
// *client.Client and the solo pacer.
type AllReserver interface {
	ReserveAll(ctx context.Context, maxWait time.Duration, wants ...client.Want) (client.Reservation, error)
}

const (
	unknownKeyRetry = 100 * time.Millisecond // while no limit is set
	limitPoll       = 10 * time.Millisecond  // local check for a key's limit before its load starts, first
	maxLimitPoll    = 500 * time.Millisecond // and at the longest
	minErrorBackoff = 50 * time.Millisecond
	maxErrorBackoff = time.Second
)

// Options are the load generator's settings beyond the keys.
type Options struct {
	// Rate, when positive, makes the load open-loop: arrivals at Rate per
	// second per key, evenly spaced, handed to the key's workers through a
	// bounded queue; an arrival that finds the queue full is shed. Zero:
	// closed loop, each worker reserves again as soon as it has admitted.
	Rate float64
	// MaxWait is the longest wait an open-loop worker accepts; a longer
	// one is refused by the pacer (shed, nothing consumed).
	MaxWait time.Duration
	// Duration, when positive, stops each key's load that long after it
	// started (its limit known); zero runs until the context ends.
	Duration time.Duration
	// Grace is the use-by allowance of the solo pacer's slots.
	Grace time.Duration
	// KeyDone, if set, is called each time a key's load has ended (its
	// Duration passed), from that key's goroutine.
	KeyDone func(*Run)
	// With are keys every event also reserves one event of, in the same
	// reservation (ReserveAll: the Reserver must be an AllReserver); each
	// admitted event is recorded under its own key and under each of them.
	With []string
}

// Target is what the load runs against.
type Target struct {
	Res Reserver
	// Ready blocks until reservations may start (a leader is known) and
	// returns a description for the log; nil starts at once.
	Ready func(ctx context.Context) (string, error)
	// LimitKnown reports whether key has a limit yet; a key's load waits
	// (polling locally) until it has. nil: every key has one.
	LimitKnown func(ctx context.Context, key string) bool
}

// Run is a running load: per key, its workers and its counters.
type Run struct {
	wg   sync.WaitGroup
	done chan struct{} // closed when every key's load has ended
	keys []*keyLoad
}

// keyLoad is one key's load and what it measured.
type keyLoad struct {
	spec Spec
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

// Start starts the load of specs against t and returns at once; rec
// receives every admitted event.
func Start(ctx context.Context, t Target, specs []Spec, o Options, rec Recorder, log *slog.Logger) *Run {
	r := &Run{done: make(chan struct{})}
	for _, s := range specs {
		k := &keyLoad{spec: s}
		for range min(s.Concurrency, maxLatShards) {
			k.lat = append(k.lat, new(bench.Histogram))
		}
		r.keys = append(r.keys, k)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if t.Ready != nil {
			log.Info("load: waiting for a leader")
			leader, err := t.Ready(ctx)
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
				k.run(ctx, t, o, rec, log.With("key", k.spec.Key))
				if o.KeyDone != nil && ctx.Err() == nil {
					o.KeyDone(r)
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

// Wait blocks until every load goroutine has ended (after ctx ends, or
// each key's duration has passed).
func (r *Run) Wait() { <-r.done }

// Done is closed when every load goroutine has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Report summarises the load per key.
func (r *Run) Report(nodeID string) *bench.LoadReport {
	rep := &bench.LoadReport{Node: nodeID, PID: os.Getpid(), Keys: map[string]*bench.KeyLoad{}}
	for _, k := range r.keys {
		kl := &bench.KeyLoad{
			Concurrency: k.spec.Concurrency,
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
		rep.Keys[k.spec.Key] = kl
	}
	return rep
}

// run is one key's load: wait for its limit, then run its workers until
// ctx ends or the duration has passed.
func (k *keyLoad) run(ctx context.Context, t Target, o Options, rec Recorder, log *slog.Logger) {
	known := func() bool {
		for _, key := range append([]string{k.spec.Key}, o.With...) {
			if !t.LimitKnown(ctx, key) {
				return false
			}
		}
		return true
	}
	if t.LimitKnown != nil && !known() {
		log.Info("load: no limit set for the key (or a --load-with key) yet; waiting")
		// Backing off: 10,000 keys polled every 10 ms were a million
		// reads a second on each agent while it registered their limits.
		for poll := limitPoll; !known(); poll = min(2*poll, maxLimitPoll) {
			if !loop.Sleep(ctx, poll) {
				return
			}
		}
	}
	var wants []client.Want // with o.With: this key's event and one of each
	if len(o.With) > 0 {
		wants = []client.Want{{Key: k.spec.Key, Count: 1}}
		for _, key := range o.With {
			wants = append(wants, client.Want{Key: key, Count: 1})
		}
	}
	kctx, cancel := ctx, context.CancelFunc(func() {})
	if o.Duration > 0 {
		kctx, cancel = context.WithTimeout(ctx, o.Duration)
	}
	defer cancel()
	k.from.Store(time.Now().UnixNano())
	errs := &throttledLog{logger: log, every: time.Second}
	var wg sync.WaitGroup
	var queue chan struct{}
	if o.Rate > 0 {
		// Room for the workers plus 2ms of arrivals (the generator wakes
		// about once a millisecond at high rates).
		queue = make(chan struct{}, k.spec.Concurrency+int(math.Ceil(o.Rate*0.002)))
		wg.Go(func() { arrivals(kctx, o.Rate, queue, &k.shedQueue) })
	}
	for i := range k.spec.Concurrency {
		w := &loadWorker{key: k.spec.Key, wants: wants, res: t.Res, rec: rec, k: k, lat: k.lat[i%len(k.lat)], errs: errs}
		wg.Go(func() {
			if queue != nil {
				w.open(kctx, queue, o.MaxWait)
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
		if !loop.Sleep(ctx, max(time.Until(next), 500*time.Microsecond)) {
			return
		}
	}
}

// maxLatShards bounds the latency histograms of a key.
const maxLatShards = 64

// loadWorker is one load goroutine's view of its key.
type loadWorker struct {
	key   string
	wants []client.Want // the key's event and one of each Options.With key; nil without
	res   Reserver
	rec   Recorder
	k     *keyLoad
	lat   *bench.Histogram
	errs  *throttledLog
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
		r, err := w.reserve(ctx, maxWait)
		took := time.Since(t0)
		if err != nil {
			if errors.Is(err, raftpace.ErrLimitExceeded) {
				w.lat.Record(took)
			}
			return err
		}
		w.lat.Record(took)
		if d := time.Until(r.At); d > 0 && !loop.Sleep(ctx, d) {
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

// reserve asks for one event of the key, or (with Options.With) for one
// of each of its wants in one reservation.
func (w *loadWorker) reserve(ctx context.Context, maxWait time.Duration) (client.Reservation, error) {
	if w.wants == nil {
		return w.res.ReserveN(ctx, w.key, 1, maxWait)
	}
	all, ok := w.res.(AllReserver)
	if !ok {
		return client.Reservation{}, fmt.Errorf("load: %T cannot reserve several keys at once (--load-with)", w.res)
	}
	return all.ReserveAll(ctx, maxWait, w.wants...)
}

// admit records an admitted event, under each key it reserved: it
// happens now.
func (w *loadWorker) admit() {
	w.k.admitted.Add(1)
	now := time.Now()
	keys := []string{w.key}
	for _, x := range w.wants[min(1, len(w.wants)):] {
		keys = append(keys, x.Key)
	}
	for _, key := range keys {
		if err := w.rec.Record(key, now); err != nil {
			w.errs.log(slog.LevelError, "load: recording the event failed", err)
		}
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
		return loop.Sleep(ctx, unknownKeyRetry)
	case errors.Is(err, raftpace.ErrQuotaExhausted):
		// The limit's answer, not a failure: shed, and look again soon
		// (the window may reset, or the quota be raised).
		w.k.shed.Add(1)
		w.errs.log(slog.LevelInfo, "load: the key's quota is spent for its window; retrying", err)
		return loop.Sleep(ctx, unknownKeyRetry)
	}
	w.k.errors.Add(1)
	w.errs.log(slog.LevelWarn, "load: reservation failed; retrying", err)
	ok := loop.Sleep(ctx, *backoff)
	*backoff = min(2**backoff, maxErrorBackoff)
	return ok
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
