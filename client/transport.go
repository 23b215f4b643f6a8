package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

// DefaultSlotTTL is how long a request through Transport may hold its
// concurrency slots (see SlotTTL), from before its pacing wait until its
// body is done.
const DefaultSlotTTL = 30 * time.Second

const (
	// capCacheTTL is how long Transport trusts its answer to "has this key
	// a cap?", keeping the lookup off the hot path.
	capCacheTTL = time.Second
	// capCacheMax is the size past which expired cap answers are swept.
	capCacheMax = 1024
	// pauseTimeout bounds recording a pause after a refusal; it runs on a
	// fresh context, since the request's may be about to end.
	pauseTimeout = 5 * time.Second
)

// TransportOption configures Transport.
type TransportOption struct{ apply func(*transport) }

// KeyFunc sets the key a request is paced (and paused) under. The default
// is req.URL.Host: the host, with the port if the URL names one, as
// written. A nil f keeps the default.
func KeyFunc(f func(*http.Request) string) TransportOption {
	return TransportOption{func(t *transport) {
		if f != nil {
			t.keyOf = f
		}
	}}
}

// SlotKeys sets the keys whose concurrency slots a request takes (all or
// nothing) before it is sent; an empty result takes none. Without this
// option a request takes a slot of its own key if, and only if, the cluster
// has a cap for that key. With it, the key's own cap is not consulted:
// include the key in the result if it should count. Every key named must
// have a cap (else the request fails with ErrUnknownKey, unsent), and at
// most 16 keys may be named at once.
func SlotKeys(f func(*http.Request) []string) TransportOption {
	return TransportOption{func(t *transport) { t.slotKeysOf = f }}
}

// SlotTTL sets how long a request may hold its slots (default
// DefaultSlotTTL, 30s; at most the node's Config.MaxSlotTTL). The time runs
// from before the pacing wait until the response body is done: the request
// (and the reading of its body) is cut off at the slot's deadline. d <= 0
// keeps the default.
func SlotTTL(d time.Duration) TransportOption {
	return TransportOption{func(t *transport) {
		if d > 0 {
			t.ttl = d
		}
	}}
}

// RefusalStatus sets the response statuses that count as refusals and
// pause the key (default 429 and 503). It replaces the set; with no codes
// no response pauses.
func RefusalStatus(codes ...int) TransportOption {
	return TransportOption{func(t *transport) {
		t.refusal = make(map[int]bool, len(codes))
		for _, c := range codes {
			t.refusal[c] = true
		}
	}}
}

// Refusals sets the policy that turns a refusal into a pause (default: the
// zero RefusalPolicy, i.e. its defaults).
func Refusals(p RefusalPolicy) TransportOption {
	return TransportOption{func(t *transport) { t.policy = p }}
}

// OnError sets a function told of errors that do not fail the request: a
// pause that could not be recorded after a refusal (the response is still
// returned, and this process's node holds its own callers off anyway). The
// default ignores them. f may be called from several goroutines at once.
func OnError(f func(key string, err error)) TransportOption {
	return TransportOption{func(t *transport) {
		if f != nil {
			t.onError = f
		}
	}}
}

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport if nil) only once c admits it, and pauses the
// request's key for the fleet when the response is a refusal:
//
//  1. Concurrency: if SlotKeys is set, the request takes a slot of each key
//     it names; otherwise, if the cluster has a cap for the request's key,
//     a slot of that cap (Acquire, all or nothing, waiting up to the
//     request context's deadline). The request is then sent with its
//     context bounded by the slot's deadline, and the slot is released when
//     the response body is read to EOF or closed (close it, as always), at
//     once if the round trip fails or the response has no body.
//  2. Rate: c.Wait(ctx, key), which also waits out a pause of the key (or
//     fails at once if the pause outlasts the context's deadline). If it
//     fails, nothing is sent and RoundTrip returns its error.
//  3. Refusal: a response with a refusal status (RefusalStatus, default 429
//     and 503) pauses the key for the fleet for the RefusalPolicy's delay,
//     where the attempt is the number of consecutive refusals this
//     Transport has seen for the key (reset by any other status). The
//     response is returned unchanged either way.
//
// The slot is taken before the rate: a rate grant is perishable (it must be
// used within the node's UseGrace of its time, and one left waiting for a
// slot is forfeited, its share of the fleet's rate wasted), while a slot
// held during the pacing wait only delays other holders. Hence SlotTTL must
// cover the pacing wait as well as the request; the wait is bounded by the
// slot's deadline, so a request is never sent on an expired slot.
//
// The key of a request is KeyFunc's (default req.URL.Host). The returned
// RoundTripper is safe for concurrent use.
func Transport(base http.RoundTripper, c *Client, opts ...TransportOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{
		base:     base,
		c:        c,
		keyOf:    func(r *http.Request) string { return r.URL.Host },
		ttl:      DefaultSlotTTL,
		refusal:  map[int]bool{http.StatusTooManyRequests: true, http.StatusServiceUnavailable: true},
		onError:  func(string, error) {},
		caps:     make(map[string]capAnswer),
		refusals: make(map[string]int),
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(t)
		}
	}
	return t
}

type transport struct {
	base       http.RoundTripper
	c          *Client
	keyOf      func(*http.Request) string
	slotKeysOf func(*http.Request) []string
	ttl        time.Duration
	refusal    map[int]bool
	policy     RefusalPolicy
	onError    func(key string, err error)

	capMu sync.Mutex
	caps  map[string]capAnswer

	refusalMu sync.Mutex
	refusals  map[string]int // key -> consecutive refusals
}

type capAnswer struct {
	capped bool
	until  time.Time
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := t.keyOf(req)
	ctx := req.Context()
	fail := func(err error) (*http.Response, error) {
		// A RoundTripper must close the request body, even on errors.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("client: transport %q: %w", key, err)
	}

	keys, err := t.slotKeys(ctx, req, key)
	if err != nil {
		return fail(err)
	}
	done := func() {}
	if len(keys) > 0 {
		h, err := t.c.Acquire(ctx, keys, t.ttl)
		if err != nil {
			return fail(err)
		}
		var cancel context.CancelFunc
		ctx, cancel = h.Context(ctx)
		done = func() {
			cancel()
			h.Release()
		}
		req = req.WithContext(ctx)
	}

	if err := t.c.Wait(ctx, key); err != nil {
		done()
		return fail(err)
	}

	resp, err := t.base.RoundTrip(req)
	if err != nil {
		done()
		return nil, err
	}
	t.observe(key, resp)
	if len(keys) > 0 {
		if resp.Body == nil || resp.Body == http.NoBody {
			done()
		} else {
			resp.Body = wrapBody(resp.Body, done)
		}
	}
	return resp, nil
}

// slotKeys returns the keys whose slots req takes.
func (t *transport) slotKeys(ctx context.Context, req *http.Request, key string) ([]string, error) {
	if t.slotKeysOf != nil {
		return t.slotKeysOf(req), nil
	}
	capped, err := t.hasCap(ctx, key)
	if err != nil || !capped {
		return nil, err
	}
	return []string{key}, nil
}

// hasCap reports whether the cluster has a cap for key, from a cache of
// answers at most capCacheTTL old. An error other than ErrUnknownKey fails
// the request rather than risk sending past a cap.
func (t *transport) hasCap(ctx context.Context, key string) (bool, error) {
	now := time.Now()
	t.capMu.Lock()
	a, ok := t.caps[key]
	t.capMu.Unlock()
	if ok && now.Before(a.until) {
		return a.capped, nil
	}
	_, err := t.c.b.Cap(ctx, key)
	if err != nil && !errors.Is(err, ErrUnknownKey) {
		return false, fmt.Errorf("looking up its concurrency cap: %w", err)
	}
	capped := err == nil
	t.capMu.Lock()
	if len(t.caps) >= capCacheMax {
		for k, a := range t.caps {
			if !now.Before(a.until) {
				delete(t.caps, k)
			}
		}
	}
	t.caps[key] = capAnswer{capped: capped, until: now.Add(capCacheTTL)}
	t.capMu.Unlock()
	return capped, nil
}

// observe counts refusals of key and pauses it on one.
func (t *transport) observe(key string, resp *http.Response) {
	t.refusalMu.Lock()
	if !t.refusal[resp.StatusCode] {
		delete(t.refusals, key)
		t.refusalMu.Unlock()
		return
	}
	t.refusals[key]++
	attempt := t.refusals[key]
	t.refusalMu.Unlock()

	d, _ := t.policy.Delay(resp.Header, time.Now(), attempt)
	d = min(d, fsm.MaxPause)
	ctx, cancel := context.WithTimeout(context.Background(), pauseTimeout)
	defer cancel()
	if _, err := t.c.Pause(ctx, key, d); err != nil {
		t.onError(key, err)
	}
}

// releaseBody calls done once, when the body is read to EOF or closed.
type releaseBody struct {
	rc   io.ReadCloser
	once sync.Once
	done func()
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.done)
	return err
}

// releaseRWBody keeps the body writable, as for a 101 Switching Protocols
// response.
type releaseRWBody struct {
	*releaseBody
	w io.Writer
}

func (b releaseRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

func wrapBody(rc io.ReadCloser, done func()) io.ReadCloser {
	b := &releaseBody{rc: rc, done: done}
	if w, ok := rc.(io.Writer); ok {
		return releaseRWBody{b, w}
	}
	return b
}
