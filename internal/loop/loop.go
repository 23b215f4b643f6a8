// Package loop runs a node's periodic work: at every tick of a period, or
// sooner when kicked, until its context ends. Every loop of the project
// has this one shape, so none can forget to stop its ticker or to watch
// its context.
package loop

import (
	"context"
	"time"
)

// Every calls fn once a period, and at once whenever kick delivers (a nil
// kick never does), until ctx ends or fn returns false. As with a
// time.Ticker, the first call comes one period (or a kick) after the
// start.
func Every(ctx context.Context, period time.Duration, kick <-chan struct{}, fn func() bool) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-kick:
		}
		if ctx.Err() != nil || !fn() {
			return
		}
	}
}

// Sleep waits d or until ctx ends; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
