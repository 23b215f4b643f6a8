package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refusingServer answers each request with the next status and
// Retry-After of the script (200 once it runs out), and counts requests.
type refusingServer struct {
	*httptest.Server
	mu     sync.Mutex
	script []reply
	hits   atomic.Int32
}

type reply struct {
	status     int
	retryAfter string // "" sends none
	body       string
}

func newRefusingServer(t *testing.T, script ...reply) *refusingServer {
	s := &refusingServer{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		rp := reply{status: http.StatusOK, body: "ok"}
		if len(s.script) > 0 {
			rp = s.script[0]
			s.script = s.script[1:]
		}
		s.mu.Unlock()
		if rp.retryAfter != "" {
			w.Header().Set("Retry-After", rp.retryAfter)
		}
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, rp.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// host is the server's key under the default KeyFunc.
func (s *refusingServer) host(t *testing.T) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// get sends a GET through hc and reads and closes the body.
func get(t *testing.T, hc *http.Client, u string) int {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestTransport_RetryAfterPausesKey(t *testing.T) {
	srv := newRefusingServer(t, reply{status: http.StatusTooManyRequests, retryAfter: "15"})
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m))}
	if got := get(t, hc, srv.URL); got != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429 returned unchanged", got)
	}
	_, pauses, _, _ := m.snapshot()
	want := []pauseCall{{srv.host(t), 15 * time.Second}}
	if !slices.Equal(pauses, want) {
		t.Errorf("pauses %v, want %v", pauses, want)
	}
	if p := m.PausedFor(srv.host(t)); p < 14*time.Second {
		t.Errorf("key paused for %v, want about 15s", p)
	}
}

// Without a usable hint the pause backs off per consecutive refusal, 503
// counts like 429, and any other status resets the count.
func TestTransport_BackoffAndReset(t *testing.T) {
	srv := newRefusingServer(t,
		reply{status: 429, retryAfter: "abc"},
		reply{status: 503},
		reply{status: 429, retryAfter: "-5"},
		reply{status: 200},
		reply{status: 503, retryAfter: "1.5"},
	)
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m))}
	for range 5 {
		get(t, hc, srv.URL)
		m.clearPauses() // send the next at once
	}
	_, pauses, _, _ := m.snapshot()
	key := srv.host(t)
	want := []pauseCall{{key, time.Second}, {key, 2 * time.Second}, {key, 4 * time.Second}, {key, time.Second}}
	if !slices.Equal(pauses, want) {
		t.Errorf("pauses %v, want %v", pauses, want)
	}
}

func TestTransport_OptionsRefusalStatusAndPolicy(t *testing.T) {
	srv := newRefusingServer(t,
		reply{status: 503},
		reply{status: 420, retryAfter: "120"},
		reply{status: 420},
	)
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m),
		RefusalStatus(420),
		Refusals(RefusalPolicy{Max: time.Minute, BackoffBase: 5 * time.Second}))}
	for range 3 {
		get(t, hc, srv.URL)
		m.clearPauses()
	}
	_, pauses, _, _ := m.snapshot()
	key := srv.host(t)
	want := []pauseCall{{key, time.Minute}, {key, 10 * time.Second}}
	if !slices.Equal(pauses, want) {
		t.Errorf("pauses %v, want %v (503 not a refusal; hint clamped to Max; backoff from base 5s)", pauses, want)
	}
}

func TestTransport_OtherKeyNotPaused(t *testing.T) {
	a := newRefusingServer(t, reply{status: 429, retryAfter: "30"})
	b := newRefusingServer(t)
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m))}
	get(t, hc, a.URL)
	start := time.Now()
	if got := get(t, hc, b.URL); got != 200 {
		t.Fatalf("status %d", got)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("the other host's request waited")
	}
	_, pauses, _, _ := m.snapshot()
	if len(pauses) != 1 || pauses[0].key != a.host(t) {
		t.Errorf("pauses %v, want only %s", pauses, a.host(t))
	}
	if p := m.PausedFor(b.host(t)); p != 0 {
		t.Errorf("other host paused for %v", p)
	}
}

func TestTransport_KeyFunc(t *testing.T) {
	srv := newRefusingServer(t, reply{status: 429, retryAfter: "3"})
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m), KeyFunc(func(*http.Request) string { return "api" }))}
	get(t, hc, srv.URL)
	calls, pauses, _, _ := m.snapshot()
	if !slices.Contains(calls, "reserve api") || !slices.Equal(pauses, []pauseCall{{"api", 3 * time.Second}}) {
		t.Errorf("calls %v pauses %v, want key api", calls, pauses)
	}
}

// A pause that could not be recorded is reported, and the response still
// returned.
func TestTransport_PauseErrorReported(t *testing.T) {
	srv := newRefusingServer(t, reply{status: 429, retryAfter: "2"})
	m := newMem()
	m.pauseErr = errors.New("no leader")
	var mu sync.Mutex
	var reported []string
	hc := &http.Client{Transport: Transport(nil, New(m), OnError(func(key string, err error) {
		mu.Lock()
		reported = append(reported, key+": "+err.Error())
		mu.Unlock()
	}))}
	if got := get(t, hc, srv.URL); got != 429 {
		t.Fatalf("status %d, want 429", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || !strings.Contains(reported[0], "no leader") || !strings.HasPrefix(reported[0], srv.host(t)) {
		t.Errorf("reported %q", reported)
	}
}

// A request paused past its deadline is not sent.
func TestTransport_WaitErrorSendsNothing(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	if _, err := m.Pause(context.Background(), srv.host(t), time.Hour); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: Transport(nil, New(m))}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
	_, err := hc.Do(req)
	if !errors.Is(err, ErrPaused) || !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("got %v, want ErrPaused", err)
	}
	var pe *PausedError
	if !errors.As(err, &pe) || pe.Key != srv.host(t) {
		t.Errorf("got %v, want a *PausedError for %s", err, srv.host(t))
	}
	if !strings.Contains(err.Error(), srv.host(t)) {
		t.Errorf("error %q does not name the key", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
	if !body.closed.Load() {
		t.Error("request body not closed")
	}
}

func TestTransport_WaitsOutShortPause(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	if _, err := m.Pause(context.Background(), srv.host(t), 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: Transport(nil, New(m))}
	start := time.Now()
	if got := get(t, hc, srv.URL); got != 200 {
		t.Fatalf("status %d", got)
	}
	if el := time.Since(start); el < 140*time.Millisecond {
		t.Errorf("sent after %v, before the pause ended", el)
	}
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// checkSlots checks one slot was acquired on keys and released exactly
// once, and that the order was acquire, reserve.
func checkSlots(t *testing.T, m *memBackend, keys []string) {
	t.Helper()
	calls, _, acquired, released := m.snapshot()
	if len(acquired) != 1 || !slices.Equal(acquired[0].Keys, keys) {
		t.Fatalf("acquired %v, want one slot on %q", acquired, keys)
	}
	if n := released[acquired[0].ID]; n != 1 {
		t.Errorf("slot released %d times, want 1", n)
	}
	ai := slices.IndexFunc(calls, func(s string) bool { return strings.HasPrefix(s, "acquire") })
	ri := slices.IndexFunc(calls, func(s string) bool { return strings.HasPrefix(s, "reserve") })
	if ai < 0 || ri < 0 || ai > ri {
		t.Errorf("calls %v: want the slot taken before the rate", calls)
	}
}

func TestTransport_SlotReleasedOnEOF(t *testing.T) {
	srv := newRefusingServer(t, reply{status: 200, body: strings.Repeat("x", 1000)})
	m := newMem()
	m.caps[srv.host(t)] = 1
	hc := &http.Client{Transport: Transport(nil, New(m))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, rel := m.snapshot(); len(rel) != 0 {
		t.Fatal("released before the body was read")
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != 1000 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	_, _, _, rel := m.snapshot()
	if len(rel) != 1 {
		t.Errorf("released %v after EOF, before Close; want one release", rel)
	}
	resp.Body.Close()
	resp.Body.Close()
	checkSlots(t, m, []string{srv.host(t)})
}

func TestTransport_SlotReleasedOnEarlyClose(t *testing.T) {
	srv := newRefusingServer(t, reply{status: 200, body: strings.Repeat("x", 1<<20)})
	m := newMem()
	m.caps[srv.host(t)] = 1
	hc := &http.Client{Transport: Transport(nil, New(m))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var buf [10]byte
	if _, err := io.ReadFull(resp.Body, buf[:]); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	checkSlots(t, m, []string{srv.host(t)})

	// The slot is free again: a second request gets it at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatalf("second request: %v", err)
	}
	resp.Body.Close()
}

func TestTransport_SlotReleasedOnRoundTripError(t *testing.T) {
	m := newMem()
	m.caps["down.example"] = 2
	boom := errors.New("connection refused")
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom })
	hc := &http.Client{Transport: Transport(base, New(m))}
	_, err := hc.Get("http://down.example/")
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the base transport's error", err)
	}
	checkSlots(t, m, []string{"down.example"})
}

func TestTransport_SlotReleasedWithoutBody(t *testing.T) {
	srv := newRefusingServer(t, reply{status: http.StatusNoContent})
	m := newMem()
	m.caps[srv.host(t)] = 1
	hc := &http.Client{Transport: Transport(nil, New(m))}
	resp, err := hc.Head(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, rel := m.snapshot()
	if len(rel) != 1 {
		t.Errorf("released %v, want the slot back as soon as a bodiless response arrived", rel)
	}
	resp.Body.Close()
	checkSlots(t, m, []string{srv.host(t)})
}

// The request is sent with its context bounded by the slot's deadline.
func TestTransport_RequestContextHasSlotDeadline(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	m.caps[srv.host(t)] = 1
	var got time.Time
	var ok bool
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got, ok = r.Context().Deadline()
		return http.DefaultTransport.RoundTrip(r)
	})
	hc := &http.Client{Transport: Transport(base, New(m), SlotTTL(7*time.Second))}
	get(t, hc, srv.URL)
	_, _, acquired, _ := m.snapshot()
	if len(acquired) != 1 {
		t.Fatalf("acquired %v", acquired)
	}
	if !ok || !got.Equal(acquired[0].Deadline) {
		t.Errorf("request deadline %v (%v), want the slot's %v", got, ok, acquired[0].Deadline)
	}
	if left := time.Until(acquired[0].Deadline); left < 6*time.Second || left > 7*time.Second {
		t.Errorf("slot deadline %v away, want SlotTTL 7s", left)
	}
}

func TestTransport_SlotKeys(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	m.caps["a"], m.caps["b"] = 1, 1
	hc := &http.Client{Transport: Transport(nil, New(m),
		SlotKeys(func(*http.Request) []string { return []string{"a", "b"} }))}
	get(t, hc, srv.URL)
	checkSlots(t, m, []string{"a", "b"})
	m.mu.Lock()
	lookups := m.capLookups
	m.mu.Unlock()
	if lookups != 0 {
		t.Errorf("%d cap lookups, want none when SlotKeys is set", lookups)
	}
}

// A full cap past the request's deadline sends nothing.
func TestTransport_ConcurrencyLimitSendsNothing(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	m.caps[srv.host(t)] = 1
	c := New(m)
	h, err := c.Acquire(context.Background(), []string{srv.host(t)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	hc := &http.Client{Transport: Transport(nil, c)}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err = hc.Do(req)
	if !errors.Is(err, ErrConcurrencyLimit) {
		t.Fatalf("got %v, want ErrConcurrencyLimit", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
	calls, _, _, _ := m.snapshot()
	if slices.ContainsFunc(calls, func(s string) bool { return strings.HasPrefix(s, "reserve") }) {
		t.Errorf("calls %v: reserved a rate slot without a concurrency slot", calls)
	}
}

// A failed Wait gives the slot back.
func TestTransport_WaitErrorReleasesSlot(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	m.caps[srv.host(t)] = 1
	m.reserveErr = ErrUnknownKey
	hc := &http.Client{Transport: Transport(nil, New(m))}
	_, err := hc.Get(srv.URL)
	if !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("got %v, want ErrUnknownKey", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
	checkSlots(t, m, []string{srv.host(t)})
}

// The cap lookup is cached: uncapped keys do not ask for every request.
func TestTransport_CapLookupCached(t *testing.T) {
	srv := newRefusingServer(t)
	m := newMem()
	hc := &http.Client{Transport: Transport(nil, New(m))}
	for range 5 {
		get(t, hc, srv.URL)
	}
	m.mu.Lock()
	lookups, acquired := m.capLookups, len(m.acquired)
	m.mu.Unlock()
	if lookups != 1 || acquired != 0 {
		t.Errorf("%d cap lookups, %d slots; want 1 and 0", lookups, acquired)
	}
}

// Concurrent requests on a capped key never exceed the cap, and every slot
// comes back.
func TestTransport_ConcurrentRequestsRespectCap(t *testing.T) {
	var inFlight, peak atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	m := newMem()
	m.caps[u.Host] = 2
	hc := &http.Client{Transport: Transport(nil, New(m))}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak %d requests in flight, cap 2", p)
	}
	_, _, acquired, released := m.snapshot()
	if len(acquired) != 8 {
		t.Errorf("%d slots acquired, want 8", len(acquired))
	}
	for _, s := range acquired {
		if released[s.ID] != 1 {
			t.Errorf("slot %s released %d times", s.ID, released[s.ID])
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
