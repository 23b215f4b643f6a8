package bench

import "time"

// ceilingPlan is one ceiling's run: the same for every approach.
type ceilingPlan struct {
	Rate        float64
	Duration    time.Duration
	Concurrency int           // callers per process
	MaxWait     time.Duration // longest wait a caller accepts
}

// DefaultCeilings are the ceilings (events/s) of a full run; a quick run
// measures 1,000/s only.
var DefaultCeilings = []float64{7, 1000, 100000}

// planCeiling sizes a ceiling's run. The maximum wait is about 250 slots
// (20ms to 1s), and each process gets callers for half the ceiling at that
// wait (R*MaxWait/2, rounded up to a power of two, at least 16): 1.5 times
// the share a process needs even if every caller waited the maximum, so
// that what limits admission is the pacer, not the load generator. (More
// callers only add scheduling work: on 2 cores, 3 x 2048 callers admitted
// less at 100,000/s than 3 x 1024.) Low rates run longer, so that one event
// more or less is a small fraction of the count: 7/s runs 30s.
func planCeiling(rate float64, quick bool) ceilingPlan {
	wait := time.Duration(min(max(250/rate, 0.02), 1) * float64(time.Second))
	conc := 16
	for float64(conc) < rate*wait.Seconds()/2 {
		conc *= 2
	}
	dur := time.Duration(min(max(210/rate, 10), 30) * float64(time.Second))
	if quick {
		dur = 4 * time.Second
	}
	return ceilingPlan{Rate: rate, Duration: dur.Round(time.Second), Concurrency: conc, MaxWait: wait.Round(time.Millisecond)}
}

// plan is what a run measures.
type plan struct {
	latency    time.Duration // per latency configuration
	callers    []int
	noLeaseLdr bool // also the leader without leases
	ceilings   []ceilingPlan
	eight      bool // the 7/s ceiling with 8 raftpace processes
	xrateSolo  bool // x/time/rate in 3 processes, each alone
	// manyKeys are the key counts of the many-slow-keys group, each
	// key's load running manyKeysDur on every agent.
	manyKeys    []int
	manyKeysDur time.Duration
}

func planFor(quick bool, ceilings []float64, keys []int) plan {
	p := plan{latency: 4 * time.Second, callers: []int{1, 16}, noLeaseLdr: true, eight: true, xrateSolo: true,
		manyKeys: []int{10, 100, 1000}, manyKeysDur: 15 * time.Second}
	if quick {
		p = plan{latency: time.Second, callers: []int{1, 16}, manyKeys: []int{100}, manyKeysDur: 5 * time.Second}
	}
	if keys != nil {
		p.manyKeys = keys
	}
	if ceilings == nil {
		ceilings = DefaultCeilings
		if quick {
			ceilings = []float64{1000}
		}
	}
	for _, r := range ceilings {
		p.ceilings = append(p.ceilings, planCeiling(r, quick))
	}
	return p
}
