package baseline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/client"
)

// testPostgres returns a connected Postgres pacer for lim on the server of
// RAFTPACE_TEST_POSTGRES (default: the local one). Without a server the
// test is skipped, except under CI, where it fails: CI must run it.
func testPostgres(t *testing.T, lim client.Limit) *Postgres {
	t.Helper()
	url := os.Getenv("RAFTPACE_TEST_POSTGRES")
	if url == "" {
		url = DefaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p, err := ConnectPostgres(ctx, url, lim, DefaultGrace)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and Postgres at %s is unreachable: %v", RedactURL(url), err)
		}
		t.Skipf("no Postgres at %s (set RAFTPACE_TEST_POSTGRES): %v", RedactURL(url), err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// testKey is a key no other test run uses; its row is removed at the end.
func testKey(t *testing.T, p *Postgres) string {
	key := fmt.Sprintf("test-%s-%d", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.conn.Exec(ctx, "DELETE FROM "+PostgresTable+" WHERE key = $1", key)
	})
	return key
}

// serverWait is the wait the statement returned for a grant: At - arrived.
func serverWait(r client.Reservation, before time.Time) time.Duration {
	return r.At.Sub(before)
}

func TestPostgres_Statement(t *testing.T) {
	t.Parallel()
	p := testPostgres(t, client.Limit{Rate: 10, Burst: 1}) // T = 100ms
	key := testKey(t, p)
	ctx := t.Context()

	// A new key: the first slot is now.
	before := time.Now()
	r1, err := p.ReserveN(ctx, key, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The slot is placed on arrival, so "about 0" means within the round
	// trip (tens of milliseconds on a loaded host), and use-by lies within
	// the grace of it (before it, if the round trip ate the grace).
	took := time.Since(before)
	if w := r1.At.Sub(before); w < 0 || w > took {
		t.Errorf("first slot waits %v after the request (round trip %v), want no wait", w, took)
	}
	if r1.UseBy.Sub(r1.At) > DefaultGrace || r1.UseBy.Before(before) {
		t.Errorf("use-by %v after the slot (round trip %v), want within the grace of the request", r1.UseBy.Sub(r1.At), took)
	}
	// The second is one interval later. Each slot is placed on its own
	// arrival, so the gap is 100ms give or take the two round trips.
	before2 := time.Now()
	r2, err := p.ReserveN(ctx, key, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took2 := time.Since(before2)
	near := func(gap, lo, hi time.Duration) bool {
		return gap >= 100*time.Millisecond-lo && gap <= 100*time.Millisecond+hi
	}
	if gap := r2.At.Sub(r1.At); !near(gap, took+10*time.Millisecond, took2+10*time.Millisecond) {
		t.Errorf("second slot %v after the first (round trips %v, %v), want 100ms", gap, took, took2)
	}
	// A caller that will not wait that long is refused, and nothing is
	// consumed: the next slot is still one interval after the second.
	if _, err := p.ReserveN(ctx, key, 1, 50*time.Millisecond); !errors.Is(err, client.ErrLimitExceeded) {
		t.Fatalf("max wait 50ms: err %v, want ErrLimitExceeded", err)
	}
	before3 := time.Now()
	r3, err := p.ReserveN(ctx, key, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took3 := time.Since(before3)
	if gap := r3.At.Sub(r2.At); !near(gap, took2+10*time.Millisecond, took3+10*time.Millisecond) {
		t.Errorf("third slot %v after the second (round trips %v, %v), want 100ms (the refusal consumed nothing)", gap, took2, took3)
	}
	// The row holds the TAT: the third slot's start plus one interval.
	var next time.Time
	p.mu.Lock()
	err = p.conn.QueryRow(ctx, "SELECT next_at FROM "+PostgresTable+" WHERE key = $1", key).Scan(&next)
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if d := next.Sub(r3.At); d < 50*time.Millisecond || d > 150*time.Millisecond {
		t.Errorf("next_at is %v after the third slot, want one interval (100ms)", d)
	}
	if _, err := p.ReserveN(ctx, key, 2, time.Second); !errors.Is(err, client.ErrInvalidRequest) {
		t.Errorf("count 2: %v", err)
	}
}

func TestPostgres_WaitExact(t *testing.T) {
	t.Parallel()
	// Straight SQL: the statement's wait is the slot's start minus the
	// server's now, never negative, for a key that is idle (TAT in the
	// past), a new key, and a key whose burst is left.
	p := testPostgres(t, client.Limit{Rate: 1, Burst: 3})
	key := testKey(t, p)
	ctx := t.Context()
	wait := func(tUS, tauUS, maxUS float64) (float64, bool) {
		t.Helper()
		var w float64
		p.mu.Lock()
		err := p.conn.QueryRow(ctx, pgReserve, key, tUS, tauUS, maxUS).Scan(&w)
		p.mu.Unlock()
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return w, true
	}
	// Burst 3 at 1/s: three at once, then 1s, 2s.
	start := time.Now()
	for i := range 3 {
		if w, ok := wait(1e6, 2e6, 10e6); !ok || w != 0 {
			t.Fatalf("burst slot %d: wait %v ok %v, want 0", i, w, ok)
		}
	}
	// Then 1s, 2s after the burst, less the time that passed since it
	// (measured here: a loaded host can take a while between statements).
	within := func(w, want float64) bool {
		return w <= want && w >= want-time.Since(start).Seconds()-0.01
	}
	w4, _ := wait(1e6, 2e6, 10e6)
	ok4 := within(w4, 1)
	w5, _ := wait(1e6, 2e6, 10e6)
	if !ok4 || !within(w5, 2) {
		t.Errorf("after the burst: waits %v, %v; want 1s, 2s less the %v since the burst", w4, w5, time.Since(start))
	}
	// Over the maximum: no row, nothing consumed.
	if _, ok := wait(1e6, 2e6, 0.5e6); ok {
		t.Error("a wait over the maximum was granted")
	}
	if w6, _ := wait(1e6, 2e6, 10e6); !within(w6, 3) {
		t.Errorf("after a refusal: wait %v after %v, want 1s more (the refusal consumed nothing)", w6, w5)
	}
	// An idle key (TAT in the past): wait 0, not negative.
	p.mu.Lock()
	_, err := p.conn.Exec(ctx, "UPDATE "+PostgresTable+" SET next_at = clock_timestamp() - interval '1 hour' WHERE key = $1", key)
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := wait(1e6, 0, 10e6); !ok || w != 0 {
		t.Errorf("idle key: wait %v ok %v, want exactly 0", w, ok)
	}
}

func TestPostgres_Concurrent(t *testing.T) {
	t.Parallel()
	// 8 callers share the connection; at 1000/s 200 slots span 199ms and
	// are never closer than an interval.
	p := testPostgres(t, client.Limit{Rate: 1000, Burst: 1})
	key := testKey(t, p)
	var mu sync.Mutex
	var ats []time.Time
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				r, err := p.ReserveN(t.Context(), key, 1, time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ats = append(ats, r.At)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	first, last := ats[0], ats[0]
	for _, a := range ats {
		if a.Before(first) {
			first = a
		}
		if a.After(last) {
			last = a
		}
	}
	// Slots are placed from each answer's arrival, so the span is at least
	// 199 intervals less the scheduling noise of one arrival.
	if span := last.Sub(first); len(ats) != 200 || span < 190*time.Millisecond {
		t.Errorf("%d slots spanning %v, want 200 over at least 199ms", len(ats), span)
	}
}

func TestRESP_Replies(t *testing.T) {
	t.Parallel()
	server, cl := net.Pipe()
	defer cl.Close()
	c := &respConn{c: cl, r: bufio.NewReader(cl), w: bufio.NewWriter(cl)}
	replies := []string{
		"+PONG\r\n",
		"-NOSCRIPT No matching script\r\n",
		":42\r\n",
		"$5\r\nhello\r\n",
		"$-1\r\n",
		"*2\r\n:1\r\n$5\r\n0.000\r\n",
		"*-1\r\n",
		"?bad\r\n",
	}
	go func() {
		br := bufio.NewReader(server)
		for _, rep := range replies {
			// Read one command: *N then N bulk strings.
			line, _ := br.ReadString('\n')
			var n int
			fmt.Sscanf(line, "*%d", &n)
			for range n {
				l, _ := br.ReadString('\n')
				var m int
				fmt.Sscanf(l, "$%d", &m)
				io.ReadFull(br, make([]byte, m+2))
			}
			io.WriteString(server, rep)
		}
		server.Close()
	}()
	ctx := t.Context()
	if v, err := c.do(ctx, "PING"); v != "PONG" || err != nil {
		t.Errorf("simple string: %v %v", v, err)
	}
	if _, err := c.do(ctx, "EVALSHA", "x", "0"); err == nil || !strings.HasPrefix(string(err.(respError)), "NOSCRIPT") {
		t.Errorf("error reply: %v", err)
	}
	if v, _ := c.do(ctx, "X"); v != int64(42) {
		t.Errorf("integer: %v", v)
	}
	if v, _ := c.do(ctx, "X"); string(v.([]byte)) != "hello" {
		t.Errorf("bulk: %v", v)
	}
	if v, _ := c.do(ctx, "X"); v.([]byte) != nil {
		t.Errorf("null bulk: %v", v)
	}
	v, _ := c.do(ctx, "X")
	if ok, w, err := parseGCRAReply(v); !ok || w != 0 || err != nil {
		t.Errorf("script reply %v: %v %v %v", v, ok, w, err)
	}
	if v, _ := c.do(ctx, "X"); v.([]any) != nil {
		t.Errorf("null array: %v", v)
	}
	if _, err := c.do(ctx, "X"); err == nil {
		t.Error("unknown reply type accepted")
	}
	if _, _, err := parseGCRAReply("nope"); err == nil {
		t.Error("bad script reply accepted")
	}
}

func TestRedis_Script(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	r, err := ConnectRedis(ctx, DefaultRedisAddr, client.Limit{Rate: 10, Burst: 2}, DefaultGrace)
	if err != nil {
		t.Skipf("no Redis on %s: %v", DefaultRedisAddr, err)
	}
	defer r.Close()
	key := fmt.Sprintf("test-%d", time.Now().UnixNano())
	var ats []time.Time
	for range 4 {
		g, err := r.ReserveN(t.Context(), key, 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ats = append(ats, g.At)
	}
	// Burst 2: two now, then 100ms apart.
	if d := ats[1].Sub(ats[0]); d > 20*time.Millisecond {
		t.Errorf("burst: second slot %v after the first", d)
	}
	if d := ats[2].Sub(ats[1]); d < 80*time.Millisecond || d > 120*time.Millisecond {
		t.Errorf("after the burst: %v, want 100ms", d)
	}
	if _, err := r.ReserveN(t.Context(), key, 1, 10*time.Millisecond); !errors.Is(err, client.ErrLimitExceeded) {
		t.Errorf("over the max wait: %v", err)
	}
	g, _ := r.ReserveN(t.Context(), key, 1, time.Second)
	if d := g.At.Sub(ats[3]); d < 80*time.Millisecond || d > 120*time.Millisecond {
		t.Errorf("after a refusal: %v after the last, want 100ms (nothing consumed)", d)
	}
}

func TestXRate(t *testing.T) {
	t.Parallel()
	x, err := NewXRate(client.Limit{Rate: 10, Burst: 1}, DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r1, err := x.ReserveN(ctx, "k", 1, time.Second)
	if err != nil || time.Until(r1.At) > 10*time.Millisecond {
		t.Fatalf("first: %v, wait %v", err, time.Until(r1.At))
	}
	if _, err := x.ReserveN(ctx, "k", 1, 10*time.Millisecond); !errors.Is(err, client.ErrLimitExceeded) {
		t.Fatalf("over the max wait: %v", err)
	}
	r2, err := x.ReserveN(ctx, "k", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := r2.At.Sub(r1.At); d < 95*time.Millisecond || d > 105*time.Millisecond {
		t.Errorf("second slot %v after the first, want 100ms (the refusal was cancelled)", d)
	}
	if r2.UseBy.Sub(r2.At) != DefaultGrace {
		t.Errorf("use-by %v after the slot", r2.UseBy.Sub(r2.At))
	}
	// Keys are independent.
	if r, _ := x.ReserveN(ctx, "other", 1, 0); time.Until(r.At) > 10*time.Millisecond {
		t.Errorf("another key waits %v", time.Until(r.At))
	}
	if _, err := x.ReserveN(ctx, "k", 2, time.Hour); !errors.Is(err, client.ErrLimitExceeded) {
		t.Errorf("more than the burst: %v", err)
	}
	if _, err := NewXRate(client.Limit{Rate: 0, Burst: 1}, DefaultGrace); err == nil {
		t.Error("rate 0 accepted")
	}
}

func TestGubernator_Client(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	statuses := []string{"UNDER_LIMIT", "OVER_LIMIT"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		st := statuses[len(bodies)%2]
		bodies = append(bodies, string(b))
		mu.Unlock()
		if r.URL.Path != "/v1/GetRateLimits" || r.Method != http.MethodPost {
			http.Error(w, "wrong path", http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"responses":[{"status":%q,"limit":"100000","remaining":"0","reset_time":"1796218009885","error":"","metadata":{}}]}`, st)
	}))
	defer srv.Close()
	g, err := NewGubernator(strings.TrimPrefix(srv.URL, "http://"), client.Limit{Rate: 100000, Burst: 1}, 4, DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	before := time.Now()
	r, err := g.ReserveN(t.Context(), "k", 1, time.Second)
	if err != nil || r.At.Before(before) || time.Since(r.At) > time.Second || !r.UseBy.After(r.At) {
		t.Fatalf("under the limit: %+v %v", r, err)
	}
	if _, err := g.ReserveN(t.Context(), "k", 1, time.Second); !errors.Is(err, client.ErrLimitExceeded) {
		t.Fatalf("over the limit: %v", err)
	}
	// A leaky bucket of 100000 per second, GLOBAL, burst one millisecond's worth.
	want := `{"requests":[{"name":"raftpace-bench","unique_key":"k","hits":"1","limit":"100000","duration":"1000","algorithm":"LEAKY_BUCKET","behavior":"GLOBAL","burst":"100"}]}`
	if bodies[0] != want {
		t.Errorf("request\n%s\nwant\n%s", bodies[0], want)
	}
	if GubernatorBurst(client.Limit{Rate: 7, Burst: 1}) != 1 || GubernatorBurst(client.Limit{Rate: 1000, Burst: 5}) != 5 {
		t.Error("GubernatorBurst")
	}
}
