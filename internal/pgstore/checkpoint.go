package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftpace/raftpace/fsm"
)

// Checkpoint is what the leader writes to Postgres periodically and on
// every config change, and what a cluster started with empty data dirs
// restores.
type Checkpoint struct {
	Limits  map[string]fsm.Limit
	Members []fsm.Member
	// Horizons holds, per key, how far ahead of the moment of writing (or,
	// from LoadCheckpoint, of reading) the key's committed horizon lies.
	// Each is in [0, fsm.MaxHorizonAhead].
	Horizons map[string]time.Duration
	// Caps holds the concurrency cap of each key, each in [1, fsm.MaxCap].
	Caps map[string]int
	// Pauses holds, per key, how long its refusal pause still runs from the
	// moment of writing (or, from LoadCheckpoint, of reading). Each is in
	// (0, fsm.MaxPause]: a pause that has ended is left out.
	Pauses map[string]time.Duration
	// Quotas holds, per key, a count of its quota's window at least the
	// one the leader committed (fsm.QuotaCount; the caller adds a margin
	// for what may be committed before the next checkpoint).
	Quotas map[string]fsm.QuotaCount
}

// validate reports every problem with cp at once.
func (cp Checkpoint) validate() error {
	const op = "save checkpoint"
	var errs []error
	for _, key := range sortedKeys(cp.Limits) {
		if err := fsm.ValidateKey(key); err != nil {
			errs = append(errs, invalidErr(op+": Limits", err))
			continue
		}
		if err := cp.Limits[key].Validate(); err != nil {
			errs = append(errs, invalidErr(fmt.Sprintf("%s: Limits[%q]", op, key), err))
		}
	}
	seen := make(map[string]bool, len(cp.Members))
	for i, m := range cp.Members {
		if err := m.Validate(); err != nil {
			errs = append(errs, invalidErr(fmt.Sprintf("%s: Members[%d]", op, i), err))
		}
		if seen[m.ID] {
			errs = append(errs, invalid(op, "Members[%d]: id %q appears more than once", i, m.ID))
		}
		seen[m.ID] = true
	}
	for _, key := range sortedKeys(cp.Horizons) {
		if err := fsm.ValidateKey(key); err != nil {
			errs = append(errs, invalidErr(op+": Horizons", err))
			continue
		}
		if d := cp.Horizons[key]; d < 0 || d > fsm.MaxHorizonAhead {
			errs = append(errs, invalid(op, "Horizons[%q] %v: must be in [0, %v] (fsm.MaxHorizonAhead)", key, d, fsm.MaxHorizonAhead))
		}
	}
	for _, key := range sortedKeys(cp.Caps) {
		if err := fsm.ValidateKey(key); err != nil {
			errs = append(errs, invalidErr(op+": Caps", err))
			continue
		}
		if n := cp.Caps[key]; n < 1 || n > fsm.MaxCap {
			errs = append(errs, invalid(op, "Caps[%q] %d: must be in [1, %d] (fsm.MaxCap)", key, n, fsm.MaxCap))
		}
	}
	for _, key := range sortedKeys(cp.Pauses) {
		if err := fsm.ValidateKey(key); err != nil {
			errs = append(errs, invalidErr(op+": Pauses", err))
			continue
		}
		if d := cp.Pauses[key]; d <= 0 || d > fsm.MaxPause {
			errs = append(errs, invalid(op, "Pauses[%q] %v: must be in (0, %v] (fsm.MaxPause); leave out a pause that has ended", key, d, fsm.MaxPause))
		}
	}
	for _, key := range sortedKeys(cp.Quotas) {
		if err := fsm.ValidateKey(key); err != nil {
			errs = append(errs, invalidErr(op+": Quotas", err))
			continue
		}
		if err := cp.Quotas[key].Validate(); err != nil || cp.Quotas[key].Per == 0 {
			errs = append(errs, invalid(op, "Quotas[%q] %+v: not a committed count of a window (%v)", key, cp.Quotas[key], err))
		}
	}
	return errors.Join(errs...)
}

// SaveCheckpoint writes cp in one transaction. It replaces the cluster's
// limits (with the keys of those in dry run), members and caps with cp's. For each horizon it stores
// horizon_at = clock_timestamp() + ahead (ahead rounded up to the
// microsecond), and never moves a stored horizon_at backwards: the stored
// value becomes the later of the two. Horizons of keys not in cp are kept
// while they lie in the future (a horizon only grows) and deleted once
// they have passed (they carry no more information).
//
// Because ahead is measured by the caller before the statement runs, the
// stored horizon lies later than the true one by the time the request took
// to reach Postgres: it errs late, which is safe.
//
// Pauses are stored the same way, as paused_until = clock_timestamp() +
// remaining (rounded up to the microsecond), never moved backwards (a pause
// only grows until it ends, so a later checkpoint with a shorter one keeps
// the stored end), kept while in the future when cp omits them, and
// deleted once passed. They too err late, the safe side for a pause.
func (s *Store) SaveCheckpoint(ctx context.Context, cp Checkpoint) error {
	const op = "save checkpoint"
	if err := cp.validate(); err != nil {
		return err
	}
	lk := sortedKeys(cp.Limits)
	lr := make([]float64, len(lk))
	lb := make([]int32, len(lk))
	var dk []string // the limits in dry run
	var qk []string // the limits with a quota
	var qq []int64
	var qp []int16
	for i, k := range lk {
		lr[i], lb[i] = cp.Limits[k].Rate, int32(cp.Limits[k].Burst)
		if cp.Limits[k].DryRun {
			dk = append(dk, k)
		}
		if l := cp.Limits[k]; l.Quota != 0 {
			qk, qq, qp = append(qk, k), append(qq, l.Quota), append(qp, int16(l.Per))
		}
	}
	nk := sortedKeys(cp.Quotas) // the committed counts; sorted, like horizons
	nper, nwin, ncount := make([]int16, len(nk)), make([]int64, len(nk)), make([]int64, len(nk))
	for i, k := range nk {
		c := cp.Quotas[k]
		nper[i], nwin[i], ncount[i] = int16(c.Per), c.Window, c.Count
	}
	mi := make([]string, len(cp.Members))
	ma := make([]string, len(cp.Members))
	mf := make([]float64, len(cp.Members))
	for i, m := range cp.Members {
		mi[i], ma[i], mf[i] = m.ID, m.Addr, m.Fraction
	}
	hk := sortedKeys(cp.Horizons) // sorted: concurrent savers lock rows in one order
	ha := make([]int64, len(hk))
	for i, k := range hk {
		ha[i] = ceilMicros(cp.Horizons[k])
	}
	ck := sortedKeys(cp.Caps)
	cm := make([]int32, len(ck))
	for i, k := range ck {
		cm[i] = int32(cp.Caps[k])
	}
	pk := sortedKeys(cp.Pauses) // sorted, like horizons
	pa := make([]int64, len(pk))
	for i, k := range pk {
		pa[i] = ceilMicros(cp.Pauses[k])
	}

	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	err = pgx.BeginFunc(c, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		cl := s.cfg.Cluster
		b.Queue(s.q.deleteLimits, cl)
		b.Queue(s.q.insertLimits, cl, lk, lr, lb)
		b.Queue(s.q.deleteDryRuns, cl)
		b.Queue(s.q.insertDryRuns, cl, dk)
		b.Queue(s.q.deleteQuotas, cl)
		b.Queue(s.q.insertQuotas, cl, qk, qq, qp)
		b.Queue(s.q.pruneQuotaCounts, cl)
		b.Queue(s.q.upsertQuotaCounts, cl, nk, nper, nwin, ncount)
		b.Queue(s.q.deleteMembers, cl)
		b.Queue(s.q.insertMembers, cl, mi, ma, mf)
		b.Queue(s.q.pruneHorizons, cl, hk)
		b.Queue(s.q.upsertHorizons, cl, hk, ha)
		b.Queue(s.q.deleteCaps, cl)
		b.Queue(s.q.insertCaps, cl, ck, cm)
		b.Queue(s.q.prunePauses, cl)
		b.Queue(s.q.upsertPauses, cl, pk, pa)
		return tx.SendBatch(c, b).Close()
	})
	if err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// LoadCheckpoint reads the cluster's checkpoint from one snapshot. found is
// false when the cluster has no limit, member, horizon, cap or pause in
// force stored. The maps are never nil; Members are sorted by ID.
//
// Horizons come back as GREATEST(horizon_at - clock_timestamp(), 0): how
// far ahead of the moment of reading (on Postgres's clock) each lies. The
// caller adds them to its own clock read after LoadCheckpoint returns, so
// the horizon it restores lies later than the stored one by the time the
// answer took to arrive: it errs late, which is safe.
//
// Pauses come back likewise as paused_until - clock_timestamp(), only those
// still in the future (at least 1µs), capped at fsm.MaxPause (which only a
// clock step back on Postgres's host could exceed). A pause that has
// already ended is left out.
func (s *Store) LoadCheckpoint(ctx context.Context) (cp Checkpoint, found bool, err error) {
	const op = "load checkpoint"
	c, cancel, err := s.begin(ctx, op)
	if err != nil {
		return Checkpoint{}, false, err
	}
	defer cancel()
	cp = Checkpoint{
		Limits:   map[string]fsm.Limit{},
		Horizons: map[string]time.Duration{},
		Caps:     map[string]int{},
		Pauses:   map[string]time.Duration{},
		Quotas:   map[string]fsm.QuotaCount{},
	}
	err = pgx.BeginTxFunc(c, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		cl := s.cfg.Cluster
		rows, _ := tx.Query(c, s.q.loadLimits, cl)
		var key string
		var lim fsm.Limit
		if _, err := pgx.ForEachRow(rows, []any{&key, &lim.Rate, &lim.Burst}, func() error {
			cp.Limits[key] = lim
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadDryRuns, cl)
		if _, err := pgx.ForEachRow(rows, []any{&key}, func() error {
			if l, ok := cp.Limits[key]; ok { // written in one transaction with the limits
				l.DryRun = true
				cp.Limits[key] = l
			}
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadQuotas, cl)
		var quota int64
		var per int16
		if _, err := pgx.ForEachRow(rows, []any{&key, &quota, &per}, func() error {
			if l, ok := cp.Limits[key]; ok { // written in one transaction with the limits
				l.Quota, l.Per = quota, fsm.Period(per)
				cp.Limits[key] = l
			}
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadQuotaCounts, cl)
		var qc fsm.QuotaCount
		if _, err := pgx.ForEachRow(rows, []any{&key, &per, &qc.Window, &qc.Count}, func() error {
			qc.Per = fsm.Period(per)
			cp.Quotas[key] = qc
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadMembers, cl)
		var m fsm.Member
		if _, err := pgx.ForEachRow(rows, []any{&m.ID, &m.Addr, &m.Fraction}, func() error {
			cp.Members = append(cp.Members, m)
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadHorizons, cl)
		var ahead int64
		if _, err := pgx.ForEachRow(rows, []any{&key, &ahead}, func() error {
			cp.Horizons[key] = time.Duration(ahead) * time.Microsecond
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadCaps, cl)
		var capMax int32
		if _, err := pgx.ForEachRow(rows, []any{&key, &capMax}, func() error {
			cp.Caps[key] = int(capMax)
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(c, s.q.loadPauses, cl)
		var left int64
		_, err := pgx.ForEachRow(rows, []any{&key, &left}, func() error {
			if left > 0 {
				cp.Pauses[key] = time.Duration(min(left, maxPauseMicros)) * time.Microsecond
			}
			return nil
		})
		return err
	})
	if err != nil {
		return Checkpoint{}, false, s.fail(ctx, op, err)
	}
	sort.Slice(cp.Members, func(i, j int) bool { return cp.Members[i].ID < cp.Members[j].ID })
	found = len(cp.Limits) > 0 || len(cp.Members) > 0 || len(cp.Horizons) > 0 || len(cp.Caps) > 0 || len(cp.Pauses) > 0 || len(cp.Quotas) > 0
	return cp, found, nil
}

// maxPauseMicros is fsm.MaxPause in whole microseconds (it is one).
const maxPauseMicros = int64(fsm.MaxPause / time.Microsecond)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
