package baseline

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/raftpace/raftpace/client"
)

// XRate paces in this process alone with golang.org/x/time/rate: one
// rate.Limiter per key shared by every caller of the process. It is the
// floor of the comparison (no coordination at all, nothing leaves the
// process) and, run in several processes at once, the picture of
// uncoordinated workers: each admits the full rate.
//
// It is used as Limiter.Reserve and Reservation.Cancel are: the time is
// read before the limiter's lock. With many goroutines the limiter then
// sees time go backwards now and then, counts the same interval twice and
// admits more than its rate: about 10% more at 100,000/s with 1,024
// goroutines on this project's 2-core machines (and no excess when the
// same calls are serialised with their time readings under one lock).
// The bench shows the library as it is used.
type XRate struct {
	lim   client.Limit
	grace time.Duration

	mu sync.RWMutex
	by map[string]*rate.Limiter
}

// NewXRate returns a pacer that gives every key the limit lim.
func NewXRate(lim client.Limit, grace time.Duration) (*XRate, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &XRate{lim: lim, grace: grace, by: make(map[string]*rate.Limiter)}, nil
}

func (x *XRate) limiter(key string) *rate.Limiter {
	x.mu.RLock()
	l := x.by[key]
	x.mu.RUnlock()
	if l != nil {
		return l
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if l = x.by[key]; l == nil {
		l = rate.NewLimiter(rate.Limit(x.lim.Rate), x.lim.Burst)
		x.by[key] = l
	}
	return l
}

// ReserveN reserves n events of key (rate.Limiter.ReserveN), or cancels the
// reservation and refuses when its delay would pass maxWait.
func (x *XRate) ReserveN(_ context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	l := x.limiter(key)
	now := time.Now()
	r := l.ReserveN(now, n)
	if !r.OK() {
		return client.Reservation{}, refused(key, rate.InfDuration, maxWait)
	}
	d := r.DelayFrom(now)
	if d > maxWait {
		r.CancelAt(now)
		return client.Reservation{}, refused(key, d, maxWait)
	}
	at := now.Add(d)
	return client.Reservation{At: at, UseBy: at.Add(x.grace)}, nil
}

// Forfeit does nothing: the slot is not given back.
func (x *XRate) Forfeit(client.Reservation) {}

// Close does nothing.
func (x *XRate) Close() error { return nil }
