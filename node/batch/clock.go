package batch

// clockBounds bounds the leader's clock against this node's: a reading
// L of the leader's clock is this node's L + θ for some θ in [lo, hi].
// Every exchange bounds θ: the message left at s (this clock), came at r
// (the leader's), its answer left at t (the leader's) and came at a
// (this clock), so s <= r + θ and t + θ <= a. The tightest bounds of many
// exchanges are those of the fastest ones, so a lease is placed with the
// uncertainty of the best round trip seen lately, not of its own: an
// answer delayed 150 ms (a thousand requests at once, a GC, a loaded
// machine) still places its slots within a fraction of a millisecond, and
// is not dropped as late.
//
// Clocks of two hosts may run apart (NTP slews them, by at most 500 ppm):
// a bound widens by maxDrift of the time since it was seen. A bound from
// another leader, or another run of it (Epoch), is dropped, and so are
// bounds that no longer agree (lo > hi: the clock jumped), for this
// exchange's own.
type clockBounds struct {
	leader     string
	epoch      int64
	ok         bool
	lo, hi     int64
	loAt, hiAt int64 // when each was seen (this clock)
}

// maxDrift is how fast two clocks may run apart: 500 ppm, NTP's largest
// slew, and more than any unsynchronised quartz clock drifts.
const maxDrift = 500e-6

// now returns the bounds as they stand at this node's time at.
func (c *clockBounds) now(at int64) (lo, hi int64) {
	return c.lo - int64(maxDrift*float64(at-c.loAt)), c.hi + int64(maxDrift*float64(at-c.hiAt))
}

// observe adds one exchange with leader (of clock epoch): sent and arrived
// on this clock, recv and answered on the leader's. It reports whether the
// leader is one seen before with another epoch: it restarted.
func (c *clockBounds) observe(leader string, epoch, sent, recv, answered, arrived int64) (restarted bool) {
	lo, hi := sent-recv, arrived-answered
	restarted = c.ok && c.leader == leader && c.epoch != epoch
	if c.ok && c.leader == leader && c.epoch == epoch {
		curLo, curHi := c.now(arrived)
		if lo >= curLo {
			c.lo, c.loAt = lo, arrived
		}
		if hi <= curHi {
			c.hi, c.hiAt = hi, arrived
		}
		if curLo, curHi = c.now(arrived); curLo <= curHi {
			return false
		}
	}
	*c = clockBounds{leader: leader, epoch: epoch, ok: true, lo: lo, hi: hi, loAt: arrived, hiAt: arrived}
	return restarted
}

// place returns the interval of this clock in which a reading ref of the
// leader's clock, made between left and arrived (this clock), fell.
func (c *clockBounds) place(ref, left, arrived int64) (from, to int64) {
	lo, hi := c.now(arrived)
	return max(ref+lo, left), min(ref+hi, arrived)
}
