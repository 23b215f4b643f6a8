package pgstore

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/fsm"
)

func TestCheckpoint_RoundTrip(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)

	cp, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if found || len(cp.Limits) != 0 || len(cp.Members) != 0 || len(cp.Horizons) != 0 {
		t.Fatalf("empty cluster: found %v, %+v", found, cp)
	}
	if cp.Limits == nil || cp.Horizons == nil {
		t.Fatal("LoadCheckpoint returned nil maps")
	}

	want := Checkpoint{
		Limits: map[string]fsm.Limit{
			"google-images":          {Rate: 10, Burst: 5},
			"provider:acme/cred:42":  {Rate: 0.1 + 0.2, Burst: 1}, // exact float8 round trip
			"ключ":                   {Rate: fsm.MaxRate, Burst: fsm.MaxBurst},
			strings.Repeat("k", 256): {Rate: math.SmallestNonzeroFloat64, Burst: 1},
		},
		Members: []fsm.Member{
			{ID: "b", Addr: "10.0.0.2:7000", Fraction: 1.0 / 3},
			{ID: "a", Addr: "[::1]:7000", Fraction: 1.0 / 3},
			{ID: "c", Addr: "host.example:7000", Fraction: 0},
		},
		Horizons: map[string]time.Duration{"google-images": 3 * time.Second, "provider:acme/cred:42": 0},
	}
	must(t, s.SaveCheckpoint(ctx, want))
	got, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !found {
		t.Fatal("found = false after SaveCheckpoint")
	}
	if !reflect.DeepEqual(got.Limits, want.Limits) {
		t.Errorf("Limits = %v, want %v", got.Limits, want.Limits)
	}
	wantMembers := []fsm.Member{want.Members[1], want.Members[0], want.Members[2]} // sorted by ID
	if !reflect.DeepEqual(got.Members, wantMembers) {
		t.Errorf("Members = %v, want %v", got.Members, wantMembers)
	}
	if len(got.Horizons) != 2 {
		t.Fatalf("Horizons = %v, want 2 keys", got.Horizons)
	}
	if h := got.Horizons["google-images"]; h > 3*time.Second || h < 2*time.Second {
		t.Errorf("horizon google-images = %v, want a little under 3s", h)
	}
	if h := got.Horizons["provider:acme/cred:42"]; h != 0 {
		t.Errorf("horizon provider:acme/cred:42 = %v, want 0", h)
	}

	// A second checkpoint replaces limits and members; horizons are kept.
	must(t, s.SaveCheckpoint(ctx, Checkpoint{
		Limits:  map[string]fsm.Limit{"new": {Rate: 1, Burst: 1}},
		Members: []fsm.Member{{ID: "a", Addr: "127.0.0.1:1", Fraction: 1}},
	}))
	got, _, err = s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, map[string]fsm.Limit{"new": {Rate: 1, Burst: 1}}) {
		t.Errorf("after replace: Limits = %v", got.Limits)
	}
	if !reflect.DeepEqual(got.Members, []fsm.Member{{ID: "a", Addr: "127.0.0.1:1", Fraction: 1}}) {
		t.Errorf("after replace: Members = %v", got.Members)
	}
	if h := got.Horizons["google-images"]; h < 2*time.Second {
		t.Errorf("after replace: horizon google-images = %v, want kept (a horizon only grows)", h)
	}
	if _, ok := got.Horizons["provider:acme/cred:42"]; ok {
		t.Errorf("after replace: a passed horizon of a key not in the checkpoint was kept: %v", got.Horizons)
	}

	// An empty checkpoint empties limits and members.
	must(t, s.SaveCheckpoint(ctx, Checkpoint{}))
	got, _, err = s.LoadCheckpoint(ctx)
	must(t, err)
	if len(got.Limits) != 0 || len(got.Members) != 0 {
		t.Errorf("after empty checkpoint: %+v", got)
	}
}

func TestCheckpoint_HorizonNeverMovesBackwards(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	save := func(ahead time.Duration) {
		t.Helper()
		must(t, s.SaveCheckpoint(ctx, Checkpoint{Horizons: map[string]time.Duration{"k": ahead}}))
	}
	load := func() time.Duration {
		t.Helper()
		cp, _, err := s.LoadCheckpoint(ctx)
		must(t, err)
		return cp.Horizons["k"]
	}
	save(10 * time.Second)
	save(time.Second) // earlier than the stored one: ignored
	save(0)
	if h := load(); h < 9*time.Second || h > 10*time.Second {
		t.Fatalf("horizon after saving 10s, 1s, 0: %v, want about 10s", h)
	}
	save(20 * time.Second) // later: taken
	if h := load(); h < 19*time.Second || h > 20*time.Second {
		t.Fatalf("horizon after saving 20s: %v, want about 20s", h)
	}
}

func TestCheckpoint_HorizonShrinksWithElapsedTime(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	const ahead, short, pause = 5 * time.Second, 100 * time.Millisecond, 200 * time.Millisecond
	start := time.Now()
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Horizons: map[string]time.Duration{"long": ahead, "short": short}}))
	time.Sleep(pause)
	cp, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	elapsed := time.Since(start) // an upper bound of the time between the two statements

	loss := ahead - cp.Horizons["long"]
	if loss < pause || loss > elapsed {
		t.Errorf("horizon lost %v over a pause of %v (at most %v between the statements): want the loss in [pause, elapsed]",
			loss, pause, elapsed)
	}
	if h, ok := cp.Horizons["short"]; !ok || h != 0 {
		t.Errorf("passed horizon = %v (present %v), want 0: never negative", h, ok)
	}
	t.Logf("loss %v over a %v pause (%v end to end)", loss, pause, elapsed)
}

func TestCheckpoint_ClustersAreIsolated(t *testing.T) {
	schema := newSchema(t)
	a := openStore(t, schema, "alpha")
	b := openStore(t, schema, "beta")
	ctx := ctxT(t)

	cpA := Checkpoint{
		Limits:   map[string]fsm.Limit{"k": {Rate: 1, Burst: 1}},
		Members:  []fsm.Member{{ID: "n1", Addr: "127.0.0.1:1", Fraction: 1}},
		Horizons: map[string]time.Duration{"k": time.Minute},
	}
	must(t, a.SaveCheckpoint(ctx, cpA))
	if _, found, err := b.LoadCheckpoint(ctx); err != nil || found {
		t.Fatalf("cluster beta sees alpha's checkpoint: found %v, err %v", found, err)
	}
	must(t, b.SaveCheckpoint(ctx, Checkpoint{Limits: map[string]fsm.Limit{"other": {Rate: 2, Burst: 2}}}))
	got, _, err := a.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, cpA.Limits) || !reflect.DeepEqual(got.Members, cpA.Members) || len(got.Horizons) != 1 {
		t.Fatalf("alpha's checkpoint after beta saved: %+v", got)
	}

	must(t, a.PublishAddress(ctx, "n1", "127.0.0.1:1", "127.0.0.1:2"))
	if addrs, err := b.DiscoverGossip(ctx, time.Minute); err != nil || len(addrs) != 0 {
		t.Fatalf("beta discovers %v (err %v), want nothing", addrs, err)
	}

	lim := fsm.Limit{Rate: 10, Burst: 1}
	must(t, a.JoinPool(ctx, "n1", 1, time.Minute))
	if _, err := b.ReservePooled(ctx, "k", lim, 1, time.Second); err == nil {
		t.Fatal("beta reserved on alpha's pool")
	} else {
		wantErr(t, err, ErrNotInPool)
	}
	must(t, b.JoinPool(ctx, "n1", 1, time.Minute))
	// Each cluster has its own cursor: both admit at once.
	for _, s := range []*Store{a, b} {
		if w, err := s.ReservePooled(ctx, "k", lim, 1, 0); err != nil || w != 0 {
			t.Fatalf("cluster %s: first reservation: wait %v, err %v", s.Cluster(), w, err)
		}
	}
}

func TestCheckpoint_Invalid(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Limits: map[string]fsm.Limit{"keep": {Rate: 1, Burst: 1}}}))
	m := fsm.Member{ID: "n1", Addr: "127.0.0.1:1", Fraction: 0.5}
	for _, tc := range []struct {
		name string
		cp   Checkpoint
		want string
	}{
		{"empty key", Checkpoint{Limits: map[string]fsm.Limit{"": {Rate: 1, Burst: 1}}}, "invalid key"},
		{"key with space", Checkpoint{Limits: map[string]fsm.Limit{"a b": {Rate: 1, Burst: 1}}}, "whitespace"},
		{"zero rate", Checkpoint{Limits: map[string]fsm.Limit{"k": {Rate: 0, Burst: 1}}}, "Rate 0"},
		{"NaN rate", Checkpoint{Limits: map[string]fsm.Limit{"k": {Rate: math.NaN(), Burst: 1}}}, "Rate NaN"},
		{"burst 0", Checkpoint{Limits: map[string]fsm.Limit{"k": {Rate: 1, Burst: 0}}}, "Burst 0"},
		{"member fraction", Checkpoint{Members: []fsm.Member{{ID: "n1", Addr: "127.0.0.1:1", Fraction: 2}}}, "Fraction 2"},
		{"member addr", Checkpoint{Members: []fsm.Member{{ID: "n1", Addr: "nope", Fraction: 0}}}, "Addr"},
		{"duplicate member", Checkpoint{Members: []fsm.Member{m, m}}, "more than once"},
		{"negative horizon", Checkpoint{Horizons: map[string]time.Duration{"k": -time.Nanosecond}}, "Horizons"},
		{"horizon too far", Checkpoint{Horizons: map[string]time.Duration{"k": fsm.MaxHorizonAhead + 1}}, "MaxHorizonAhead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.SaveCheckpoint(ctx, tc.cp)
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "pgstore: ") {
				t.Fatalf("error %q: want it to start with pgstore: and mention %q", err, tc.want)
			}
		})
	}
	got, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, map[string]fsm.Limit{"keep": {Rate: 1, Burst: 1}}) {
		t.Fatalf("an invalid checkpoint changed the stored one: %v", got.Limits)
	}
}

// TestCheckpoint_Large saves many keys in one checkpoint (one round trip per
// table, not per key).
func TestCheckpoint_Large(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	cp := Checkpoint{Limits: map[string]fsm.Limit{}, Horizons: map[string]time.Duration{}}
	for i := range 5000 {
		k := "key-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "-" + strconv.Itoa(i)
		cp.Limits[k] = fsm.Limit{Rate: float64(i + 1), Burst: i%10 + 1}
		cp.Horizons[k] = time.Duration(i) * time.Millisecond
	}
	start := time.Now()
	must(t, s.SaveCheckpoint(ctx, cp))
	got, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, cp.Limits) || len(got.Horizons) != len(cp.Horizons) {
		t.Fatalf("round trip of %d keys lost data: %d limits, %d horizons", len(cp.Limits), len(got.Limits), len(got.Horizons))
	}
	t.Logf("save+load of %d keys: %v", len(cp.Limits), time.Since(start))
}
