package pgstore

import (
	"errors"
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
			"tenant:*":               {Rate: 2, Burst: 2, DryRun: true},
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

// TestCheckpoint_DryRunFollowsItsLimit: a limit leaves dry run when a
// later checkpoint enforces it, and its dry-run row goes with the limit.
func TestCheckpoint_DryRunFollowsItsLimit(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	for _, lims := range []map[string]fsm.Limit{
		{"a": {Rate: 1, Burst: 1, DryRun: true}, "b": {Rate: 2, Burst: 1, DryRun: true}},
		{"a": {Rate: 1, Burst: 1}, "b": {Rate: 2, Burst: 1, DryRun: true}},
		{"a": {Rate: 1, Burst: 1}},
		{"a": {Rate: 1, Burst: 1}, "b": {Rate: 2, Burst: 1}},
	} {
		must(t, s.SaveCheckpoint(ctx, Checkpoint{Limits: lims}))
		got, _, err := s.LoadCheckpoint(ctx)
		must(t, err)
		if !reflect.DeepEqual(got.Limits, lims) {
			t.Fatalf("saved %v, loaded %v", lims, got.Limits)
		}
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
		Caps:     map[string]int{"k": 4},
		Pauses:   map[string]time.Duration{"k": time.Minute},
	}
	must(t, a.SaveCheckpoint(ctx, cpA))
	if _, found, err := b.LoadCheckpoint(ctx); err != nil || found {
		t.Fatalf("cluster beta sees alpha's checkpoint: found %v, err %v", found, err)
	}
	must(t, b.SaveCheckpoint(ctx, Checkpoint{Limits: map[string]fsm.Limit{"other": {Rate: 2, Burst: 2}}, Caps: map[string]int{"other": 1}}))
	got, _, err := a.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, cpA.Limits) || !reflect.DeepEqual(got.Members, cpA.Members) || len(got.Horizons) != 1 ||
		!reflect.DeepEqual(got.Caps, cpA.Caps) || len(got.Pauses) != 1 {
		t.Fatalf("alpha's checkpoint after beta saved: %+v", got)
	}

	must(t, a.PublishAddress(ctx, "n1", "127.0.0.1:1", "127.0.0.1:2"))
	if addrs, err := b.DiscoverGossip(ctx, time.Minute); err != nil || len(addrs) != 0 {
		t.Fatalf("beta discovers %v (err %v), want nothing", addrs, err)
	}

	lim := fsm.Limit{Rate: 10, Burst: 1}
	must(t, a.JoinPool(ctx, "n1", 1, time.Minute))
	if _, err := b.ReservePooled(ctx, "n1", "k", lim, 1, time.Second); err == nil {
		t.Fatal("beta reserved on alpha's pool")
	} else {
		wantErr(t, err, ErrNotInPool)
	}
	must(t, b.JoinPool(ctx, "n1", 1, time.Minute))
	// Each cluster has its own cursor: both admit at once.
	for _, s := range []*Store{a, b} {
		if w, err := s.ReservePooled(ctx, "n1", "k", lim, 1, 0); err != nil || w != 0 {
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
		{"cap key", Checkpoint{Caps: map[string]int{"a b": 1}}, "Caps"},
		{"cap 0", Checkpoint{Caps: map[string]int{"k": 0}}, `Caps["k"] 0: must be in [1, 1000000] (fsm.MaxCap)`},
		{"negative cap", Checkpoint{Caps: map[string]int{"k": -1}}, `Caps["k"] -1`},
		{"cap too large", Checkpoint{Caps: map[string]int{"k": fsm.MaxCap + 1}}, `Caps["k"] 1000001`},
		{"pause key", Checkpoint{Pauses: map[string]time.Duration{"": time.Second}}, "Pauses"},
		{"pause 0", Checkpoint{Pauses: map[string]time.Duration{"k": 0}}, `Pauses["k"] 0s: must be in (0, 24h0m0s] (fsm.MaxPause)`},
		{"negative pause", Checkpoint{Pauses: map[string]time.Duration{"k": -time.Second}}, `Pauses["k"] -1s`},
		{"pause too long", Checkpoint{Pauses: map[string]time.Duration{"k": fsm.MaxPause + 1}}, "MaxPause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.SaveCheckpoint(ctx, tc.cp)
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "pgstore: ") {
				t.Fatalf("error %q: want it to start with pgstore: and mention %q", err, tc.want)
			}
		})
	}
	// Every problem is reported at once.
	err := s.SaveCheckpoint(ctx, Checkpoint{
		Caps:   map[string]int{"c1": 0, "c2": fsm.MaxCap + 1},
		Pauses: map[string]time.Duration{"p1": 0, "p2": fsm.MaxPause + time.Second},
	})
	wantErr(t, err, ErrInvalid)
	for _, w := range []string{`Caps["c1"]`, `Caps["c2"]`, `Pauses["p1"]`, `Pauses["p2"]`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
	got, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, map[string]fsm.Limit{"keep": {Rate: 1, Burst: 1}}) || len(got.Caps) != 0 || len(got.Pauses) != 0 {
		t.Fatalf("an invalid checkpoint changed the stored one: %+v", got)
	}
}

// TestCheckpoint_Large saves many keys in one checkpoint (one round trip per
// table, not per key).
func TestCheckpoint_Large(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	cp := Checkpoint{Limits: map[string]fsm.Limit{}, Horizons: map[string]time.Duration{}, Caps: map[string]int{}, Pauses: map[string]time.Duration{}}
	for i := range 5000 {
		k := "key-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "-" + strconv.Itoa(i)
		cp.Limits[k] = fsm.Limit{Rate: float64(i + 1), Burst: i%10 + 1}
		cp.Horizons[k] = time.Duration(i) * time.Millisecond
		cp.Caps[k] = i + 1
		cp.Pauses[k] = time.Minute + time.Duration(i)*time.Millisecond
	}
	start := time.Now()
	must(t, s.SaveCheckpoint(ctx, cp))
	got, _, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Limits, cp.Limits) || len(got.Horizons) != len(cp.Horizons) ||
		!reflect.DeepEqual(got.Caps, cp.Caps) || len(got.Pauses) != len(cp.Pauses) {
		t.Fatalf("round trip of %d keys lost data: %d limits, %d horizons, %d caps, %d pauses",
			len(cp.Limits), len(got.Limits), len(got.Horizons), len(got.Caps), len(got.Pauses))
	}
	t.Logf("save+load of %d keys: %v", len(cp.Limits), time.Since(start))
}

func TestCheckpoint_CapsAndPausesRoundTrip(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)

	cp, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	if found || cp.Caps == nil || cp.Pauses == nil || len(cp.Caps) != 0 || len(cp.Pauses) != 0 {
		t.Fatalf("empty cluster: found %v, caps %v, pauses %v (want empty, non-nil)", found, cp.Caps, cp.Pauses)
	}

	// Caps or pauses alone are a checkpoint worth restoring.
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Caps: map[string]int{"only": 1}}))
	if _, found, err := s.LoadCheckpoint(ctx); err != nil || !found {
		t.Fatalf("checkpoint of caps only: found %v, err %v", found, err)
	}

	const long = 30 * time.Second
	wantCaps := map[string]int{
		"only":                   1,
		"provider:acme/cred:42":  7,
		"ключ":                   fsm.MaxCap,
		strings.Repeat("k", 256): 2,
	}
	start := time.Now()
	must(t, s.SaveCheckpoint(ctx, Checkpoint{
		Caps:   wantCaps,
		Pauses: map[string]time.Duration{"google-images": long, "max": fsm.MaxPause, "tiny": time.Nanosecond + time.Hour},
	}))
	got, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	elapsed := time.Since(start)
	if !found {
		t.Fatal("found = false after saving caps and pauses")
	}
	if !reflect.DeepEqual(got.Caps, wantCaps) {
		t.Errorf("Caps = %v, want %v", got.Caps, wantCaps)
	}
	if len(got.Pauses) != 3 {
		t.Fatalf("Pauses = %v, want 3 keys", got.Pauses)
	}
	for key, d := range map[string]time.Duration{"google-images": long, "max": fsm.MaxPause, "tiny": time.Hour + time.Microsecond} {
		// Stored rounded up to the microsecond, read some time later: at
		// most d, at least d less the time between the two statements.
		if p := got.Pauses[key]; p > d || p < d-elapsed {
			t.Errorf("pause %q = %v, want in [%v, %v]", key, p, d-elapsed, d)
		}
	}

	// Caps are replaced wholesale; pauses a checkpoint omits are kept while
	// they run (a pause only grows until it ends).
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Caps: map[string]int{"new": 3}}))
	got, _, err = s.LoadCheckpoint(ctx)
	must(t, err)
	if !reflect.DeepEqual(got.Caps, map[string]int{"new": 3}) {
		t.Errorf("after replace: Caps = %v, want only new=3", got.Caps)
	}
	if p := got.Pauses["google-images"]; p < long-time.Since(start) || p > long {
		t.Errorf("after a checkpoint without it: pause google-images = %v, want kept", p)
	}

	// An empty checkpoint empties the caps; running pauses stay.
	must(t, s.SaveCheckpoint(ctx, Checkpoint{}))
	got, found, err = s.LoadCheckpoint(ctx)
	must(t, err)
	if len(got.Caps) != 0 || len(got.Pauses) != 3 || !found {
		t.Errorf("after empty checkpoint: found %v, caps %v, pauses %v (want no caps, 3 pauses)", found, got.Caps, got.Pauses)
	}
}

func TestCheckpoint_PauseNeverShortened(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	save := func(d time.Duration) {
		t.Helper()
		must(t, s.SaveCheckpoint(ctx, Checkpoint{Pauses: map[string]time.Duration{"k": d}}))
	}
	load := func() time.Duration {
		t.Helper()
		cp, _, err := s.LoadCheckpoint(ctx)
		must(t, err)
		return cp.Pauses["k"]
	}
	save(10 * time.Second)
	save(time.Second) // ends earlier than the stored one: ignored
	if p := load(); p < 9*time.Second || p > 10*time.Second {
		t.Fatalf("pause after saving 10s, then 1s: %v, want about 10s", p)
	}
	save(20 * time.Second) // ends later: taken
	if p := load(); p < 19*time.Second || p > 20*time.Second {
		t.Fatalf("pause after saving 20s: %v, want about 20s", p)
	}
}

func TestCheckpoint_PauseShrinksAndPassedIsDropped(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	const long, short, wait = 5 * time.Second, 100 * time.Millisecond, 200 * time.Millisecond
	start := time.Now()
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Pauses: map[string]time.Duration{"long": long, "short": short, "again": short}}))
	time.Sleep(wait)
	cp, found, err := s.LoadCheckpoint(ctx)
	must(t, err)
	elapsed := time.Since(start) // an upper bound of the time between the two statements

	loss := long - cp.Pauses["long"]
	if loss < wait || loss > elapsed {
		t.Errorf("pause lost %v over a wait of %v (at most %v between the statements): want the loss in [wait, elapsed]",
			loss, wait, elapsed)
	}
	for _, key := range []string{"short", "again"} {
		if p, ok := cp.Pauses[key]; ok {
			t.Errorf("passed pause %q returned as %v: want it left out", key, p)
		}
	}
	if !found || len(cp.Pauses) != 1 {
		t.Errorf("found %v, pauses %v: want found with only the running pause", found, cp.Pauses)
	}

	// A passed pause is deleted by the next checkpoint, whether or not it
	// names the key; naming it again starts a new pause from then.
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Pauses: map[string]time.Duration{"again": time.Second}}))
	var rows int
	must(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM "`+s.cfg.Schema+`".pauses WHERE cluster = $1`, s.Cluster()).Scan(&rows))
	if rows != 2 {
		t.Errorf("%d pause rows after the next checkpoint, want 2 (long, again): the passed one is deleted", rows)
	}
	cp, _, err = s.LoadCheckpoint(ctx)
	must(t, err)
	if p := cp.Pauses["again"]; p < 900*time.Millisecond || p > time.Second {
		t.Errorf("pause named again after it passed = %v, want about 1s", p)
	}
	t.Logf("loss %v over a %v wait (%v end to end)", loss, wait, elapsed)
}

// TestCheckpoint_PauseStoredToTheMicrosecond checks the stored end against
// Postgres's clock: clock_timestamp() + remaining, rounded up.
func TestCheckpoint_PauseStoredToTheMicrosecond(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	const d = time.Minute + 1500*time.Nanosecond // 60000001.5µs: stored as 60000002µs
	before := pgNowUS(t, s)
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Pauses: map[string]time.Duration{"k": d}}))
	after := pgNowUS(t, s)
	var until int64
	must(t, s.pool.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM paused_until) * 1000000)::int8 FROM "`+s.cfg.Schema+`".pauses WHERE cluster = $1 AND key = 'k'`,
		s.Cluster()).Scan(&until))
	if left := until - before; left < 60000002 || until-after > 60000002 {
		t.Errorf("paused_until is %dµs after the clock before the save and %dµs after the one after it: want clock_timestamp() + 60000002µs in between",
			left, until-after)
	}
}

// A limit's quota travels with it, and a committed count follows
// fsm.CommitQuotas's rule: it only grows within its window, a later window
// or another period replaces it, an earlier window changes nothing.
func TestCheckpoint_QuotasRoundTripAndOnlyGrow(t *testing.T) {
	s := newStore(t, "quotas")
	ctx := ctxT(t)
	lims := map[string]fsm.Limit{
		"api":      {Rate: 10, Burst: 10, Quota: 100000, Per: fsm.PerDay},
		"tenant:*": {Rate: 1, Burst: 1, DryRun: true, Quota: 5, Per: fsm.PerMonth},
		"plain":    {Rate: 1, Burst: 1},
	}
	save := func(c fsm.QuotaCount) {
		t.Helper()
		must(t, s.SaveCheckpoint(ctx, Checkpoint{Limits: lims, Quotas: map[string]fsm.QuotaCount{"api": c}}))
	}
	expect := func(want fsm.QuotaCount) {
		t.Helper()
		cp, found, err := s.LoadCheckpoint(ctx)
		must(t, err)
		if !found || !reflect.DeepEqual(cp.Limits, lims) {
			t.Fatalf("limits = %v (found %v), want %v", cp.Limits, found, lims)
		}
		if got := cp.Quotas["api"]; got != want || len(cp.Quotas) != 1 {
			t.Fatalf("quota counts = %v, want api %+v", cp.Quotas, want)
		}
	}
	now := time.Now().Unix() // a window of today: older than 32 days is pruned
	today, _ := fsm.PerDay.Window(time.Unix(now, 0))
	t0 := today.Unix()
	save(fsm.QuotaCount{Per: fsm.PerDay, Window: t0, Count: 40})
	expect(fsm.QuotaCount{Per: fsm.PerDay, Window: t0, Count: 40})
	save(fsm.QuotaCount{Per: fsm.PerDay, Window: t0, Count: 30}) // a stale writer
	expect(fsm.QuotaCount{Per: fsm.PerDay, Window: t0, Count: 40})
	save(fsm.QuotaCount{Per: fsm.PerDay, Window: t0 - 86400, Count: 90}) // the day before
	expect(fsm.QuotaCount{Per: fsm.PerDay, Window: t0, Count: 40})
	save(fsm.QuotaCount{Per: fsm.PerHour, Window: t0, Count: 3}) // the period changed
	expect(fsm.QuotaCount{Per: fsm.PerHour, Window: t0, Count: 3})
	save(fsm.QuotaCount{Per: fsm.PerHour, Window: t0 + 3600, Count: 1})
	expect(fsm.QuotaCount{Per: fsm.PerHour, Window: t0 + 3600, Count: 1})

	// A count of a window long gone is pruned by the next checkpoint.
	old, _ := fsm.PerDay.Window(time.Unix(now-40*86400, 0))
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Limits: lims, Quotas: map[string]fsm.QuotaCount{"old": {Per: fsm.PerDay, Window: old.Unix(), Count: 9}}}))
	must(t, s.SaveCheckpoint(ctx, Checkpoint{Limits: lims}))
	if cp, _, err := s.LoadCheckpoint(ctx); err != nil || len(cp.Quotas) != 1 || cp.Quotas["api"].Window != t0+3600 {
		t.Fatalf("after a checkpoint with an older window: %v, %v", cp.Quotas, err)
	}

	for _, bad := range []fsm.QuotaCount{{}, {Per: fsm.PerDay, Window: t0 + 1, Count: 1}, {Per: 9, Window: t0}} {
		err := s.SaveCheckpoint(ctx, Checkpoint{Quotas: map[string]fsm.QuotaCount{"api": bad}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Quotas") {
			t.Errorf("SaveCheckpoint with a quota count %+v: %v, want an invalid-argument error naming Quotas", bad, err)
		}
	}
}
