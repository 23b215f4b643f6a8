package lease

import (
	"testing"
	"time"

	"github.com/raftpace/raftpace/node/wire"
)

func held(l wire.Lease, sent, arrived int64) heldLease {
	return heldLease{Lease: l, sent: sent, arrived: arrived}
}

func TestKeyLease_TakeSkipsExpiredNeverSaves(t *testing.T) {
	const ms = int64(time.Millisecond)
	grace := 50 * ms
	kl := &keyLease{want: 1}
	// 10 slots, 10ms apart, from 1000ms (requested at 1000ms, arrived 1001ms).
	kl.q[0] = held(wire.Lease{Base: 0, Spacing: 10 * ms, Count: 10}, 1000*ms, 1001*ms)
	kl.queued = 1
	at, useBy, r := kl.take(1001*ms, grace, int64(time.Hour), false)
	if r != taken || at != 1001*ms || useBy != 1050*ms {
		t.Fatalf("first take: at=%d useBy=%d r=%v", at/ms, useBy/ms, r)
	}
	// Paused until 1125ms: slots at +10..+70 (use-by up to 1120) are gone,
	// and the one at +80 (use-by 1130) has 5ms left, under the margin of
	// grace/4 (12.5ms); the next usable is the one at +90 (use-by 1140).
	at, useBy, r = kl.take(1125*ms, grace, int64(time.Hour), false)
	if r != taken || at != 1091*ms || useBy != 1140*ms {
		t.Fatalf("after pause: got slot at %dms use-by %dms (%v), want 1091ms, 1140ms", at/ms, useBy/ms, r)
	}
	if kl.q[0].expired != 8 {
		t.Errorf("expired %d, want 8", kl.q[0].expired)
	}
	// With the protection off, the stale slot at +20 would have been served.
	unsafe := &keyLease{want: 1}
	unsafe.q[0] = held(wire.Lease{Base: 0, Spacing: 10 * ms, Count: 10}, 1000*ms, 1001*ms)
	unsafe.queued = 1
	if at, _, _ := unsafe.take(1125*ms, grace, int64(time.Hour), true); at != 1001*ms {
		t.Errorf("spendExpired: got %dms, want the stale 1001ms", at/ms)
	}
	// Long after: everything expired; the cache is empty.
	if _, _, r := kl.take(5000*ms, grace, int64(time.Hour), false); r != empty {
		t.Errorf("got %v, want empty", r)
	}
}

func TestKeyLease_TooFarConsumesNothing(t *testing.T) {
	const ms = int64(time.Millisecond)
	kl := &keyLease{want: 1}
	kl.q[0] = held(wire.Lease{Base: 100 * ms, Spacing: 10 * ms, Count: 3}, 0, 0)
	kl.queued = 1
	if _, _, r := kl.take(0, 50*ms, 50*ms, false); r != tooFar {
		t.Fatalf("got %v, want tooFar", r)
	}
	if at, _, r := kl.take(0, 50*ms, 200*ms, false); r != taken || at != 100*ms {
		t.Fatalf("got at=%d %v: the refused slot must still be there", at/ms, r)
	}
}

func TestKeyLease_QueueAndSizing(t *testing.T) {
	const ms = int64(time.Millisecond)
	far := int64(1 << 40)
	kl := &keyLease{want: 1}
	kl.install(wire.Lease{Base: 0, Spacing: ms, Count: 1}, 0, 0)
	kl.install(wire.Lease{Base: 1 * ms, Spacing: ms, Count: 2}, 0, 0)
	if kl.queued != 2 {
		t.Fatalf("queued %d, want 2", kl.queued)
	}
	// Leases are served in order: 0ms from the first, then 1ms, 2ms.
	for _, want := range []int64{0, ms, 2 * ms} {
		if at, _, r := kl.take(0, 50*ms, far, false); r != taken || at != want {
			t.Fatalf("got at=%d %v, want %d", at, r, want)
		}
	}
	// Two leases fully served: the wanted size doubled twice.
	if _, _, r := kl.take(0, 50*ms, far, false); r != empty {
		t.Fatalf("got %v, want empty", r)
	}
	if kl.want != 4 {
		t.Fatalf("want %d after two used-up leases, expected 4", kl.want)
	}
	// One of four served, the rest expire: shrink to what was served.
	kl.install(wire.Lease{Base: 0, Spacing: ms, Count: 4}, 0, 0)
	kl.take(0, 50*ms, far, false)
	if _, _, r := kl.take(time.Second.Nanoseconds(), 50*ms, far, false); r != empty {
		t.Fatalf("got %v, want empty after expiry", r)
	}
	if kl.want != 1 {
		t.Fatalf("want %d after expiries, expected 1 (what was served)", kl.want)
	}
}

// BenchmarkLeaseTake is the follower's hot path: serve a slot from a held
// lease.
func BenchmarkLeaseTake(b *testing.B) {
	kl := &keyLease{want: 1}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if kl.queued == 0 || kl.q[kl.queued-1].next >= kl.q[kl.queued-1].Count {
			kl.queued = 0
			kl.install(wire.Lease{Base: 0, Spacing: 1, Count: 1 << 20}, int64(i), int64(i))
		}
		kl.take(int64(i), 5e7, 1<<40, false)
	}
}

// At a rate far above what the callers use (1 slot per µs, one caller
// every 66µs), the queue lags behind real time: once the lag passes the
// grace, every slot the edge reaches would have microseconds of its use-by
// left. Every slot served keeps at least grace/4.
func TestKeyLease_LaggingQueueKeepsAMargin(t *testing.T) {
	const us = int64(time.Microsecond)
	grace := 50 * int64(time.Millisecond)
	kl := &keyLease{want: 1}
	kl.q[0] = held(wire.Lease{Base: 0, Spacing: us, Count: 1 << 20}, 0, 0)
	kl.queued = 1
	served := 0
	for now := int64(0); now < int64(time.Second); now += 66 * us {
		_, useBy, r := kl.take(now, grace, int64(time.Hour), false)
		if r != taken {
			t.Fatalf("at %v: %v, want a slot", time.Duration(now), r)
		}
		if left := useBy - now; left < grace/4 {
			t.Fatalf("at %v: served a slot with %v of its use-by left, want at least %v", time.Duration(now), time.Duration(left), time.Duration(grace/4))
		}
		served++
	}
	if served < 15000 {
		t.Errorf("served %d slots in 1 s, want one per call", served)
	}
}
