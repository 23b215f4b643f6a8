package baseline

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftpace/raftpace/client"
)

// DefaultRedisAddr is where the bench looks for a Redis server.
const DefaultRedisAddr = "127.0.0.1:6379"

// redisGCRA is GCRA in a Lua script, in the style of go-redis/redis_rate:
// the clock is Redis's (TIME inside the script), the key holds the TAT,
// and the script answers at once. redis_rate's allowN only allows or not;
// this one reserves like the other pacers: it returns {1, wait} with the
// slot's wait (microseconds) when the wait is within the caller's maximum,
// and {0, wait} consuming nothing otherwise.
//
// KEYS[1]: the key's TAT (microseconds since 2017-01-01, as redis_rate
// shifts its epoch to keep doubles exact). ARGV: T, tau, max wait (us).
const redisGCRA = `local t = redis.call("TIME")
local now = (tonumber(t[1]) - 1483228800) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local maxwait = tonumber(ARGV[3])
local tat = now
local v = redis.call("GET", KEYS[1])
if v then
  tat = math.max(tonumber(v), now)
end
local wait = math.max(tat - tau - now, 0)
if wait > maxwait then
  return {0, string.format("%.3f", wait)}
end
local new_tat = tat + T
redis.call("SET", KEYS[1], string.format("%.3f", new_tat), "PX", math.ceil((new_tat - now) / 1000) + 1000)
return {1, string.format("%.3f", wait)}
`

var redisGCRASHA = func() string {
	s := sha1.Sum([]byte(redisGCRA))
	return hex.EncodeToString(s[:])
}()

// Redis paces with the GCRA script: one EVALSHA per reservation on one
// connection per process, shared by its callers behind a mutex (like the
// Postgres pacer).
type Redis struct {
	lim   client.Limit
	grace time.Duration
	addr  string

	mu   sync.Mutex
	conn *respConn
}

// ConnectRedis connects to addr, checks it answers PING and loads the
// script.
func ConnectRedis(ctx context.Context, addr string, lim client.Limit, grace time.Duration) (*Redis, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	c, err := dialRESP(ctx, addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.do(ctx, "PING"); err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: redis at %s: %w", addr, err)
	}
	if _, err := c.do(ctx, "SCRIPT", "LOAD", redisGCRA); err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: redis at %s: loading the script: %w", addr, err)
	}
	return &Redis{lim: lim, grace: grace, addr: addr, conn: c}, nil
}

// ReserveN reserves one event of key (n must be 1) with one EVALSHA, or
// refuses (consuming nothing) when the wait would pass maxWait.
func (r *Redis) ReserveN(ctx context.Context, key string, n int, maxWait time.Duration) (client.Reservation, error) {
	if err := one(key, n); err != nil {
		return client.Reservation{}, err
	}
	t, tau := interval(r.lim)
	args := []string{"EVALSHA", redisGCRASHA, "1", "raftpace-bench:" + key,
		strconv.FormatFloat(micros(t), 'f', -1, 64),
		strconv.FormatFloat(micros(tau), 'f', -1, 64),
		strconv.FormatFloat(micros(maxWait), 'f', -1, 64)}
	r.mu.Lock()
	sent := time.Now()
	v, err := r.conn.do(ctx, args...)
	if e, ok := err.(respError); ok && strings.HasPrefix(string(e), "NOSCRIPT") {
		// The server lost its script cache (restart, SCRIPT FLUSH).
		if _, err = r.conn.do(ctx, "SCRIPT", "LOAD", redisGCRA); err == nil {
			v, err = r.conn.do(ctx, args...)
		}
	}
	arrived := time.Now()
	r.mu.Unlock()
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: redis: reserve %q: %w", key, err)
	}
	ok, wait, err := parseGCRAReply(v)
	if err != nil {
		return client.Reservation{}, fmt.Errorf("bench: redis: reserve %q: %w", key, err)
	}
	if !ok {
		return client.Reservation{}, refused(key, wait, maxWait)
	}
	return remoteGrant(sent, arrived, wait, r.grace), nil
}

// parseGCRAReply reads the script's {allowed, wait_us} answer.
func parseGCRAReply(v any) (bool, time.Duration, error) {
	a, isArr := v.([]any)
	if !isArr || len(a) != 2 {
		return false, 0, fmt.Errorf("unexpected script reply %v", v)
	}
	allowed, isInt := a[0].(int64)
	ws, isBulk := a[1].([]byte)
	if !isInt || !isBulk {
		return false, 0, fmt.Errorf("unexpected script reply %v", v)
	}
	us, err := strconv.ParseFloat(string(ws), 64)
	if err != nil {
		return false, 0, fmt.Errorf("unexpected wait %q in script reply", ws)
	}
	return allowed == 1, time.Duration(us * float64(time.Microsecond)), nil
}

// Forfeit does nothing: the slot is not given back.
func (r *Redis) Forfeit(client.Reservation) {}

// Close closes the connection.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn.Close()
}
