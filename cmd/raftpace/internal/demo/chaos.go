package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
)

// chaosPlan is the state of Config.Chaos: when the leader is killed and
// restarted, and what happened.
type chaosPlan struct {
	killSec, restartSec int // the seconds (ticks) planned for the kill and the restart
	victim              *member
	killedAt            time.Time
	closed              chan struct{} // closed when the killed node's Close and its load have ended
	restarting          bool
	restarted           chan restart
	restartedAt         time.Time
}

type restart struct {
	n   *node.Node
	err error
}

// newChaos plans the kill at about a third of the run and the restart
// chaosDown seconds later, less when the run is short (half of what is
// left after the kill, so the cluster runs a while with the node back).
func newChaos(duration time.Duration) *chaosPlan {
	secs := int(duration / time.Second)
	kill := max(1, int(math.Round(duration.Seconds()/3)))
	down := max(1, min(chaosDown, (secs-kill)/2))
	return &chaosPlan{killSec: kill, restartSec: kill + down, restarted: make(chan restart, 1)}
}

// step runs after the line of second sec: it kills the leader when the
// kill is due (at the first second from killSec at which a leader grants)
// and starts the restart when that is due.
func (ch *chaosPlan) step(r *runner, sec int, members []*member) {
	out := r.out
	switch {
	case ch.victim == nil && sec >= ch.killSec:
		var victim *member
		for _, m := range members {
			if m.n != nil && m.n.IsLeader() {
				victim = m
			}
		}
		if victim == nil {
			return // an election is going on: try at the next second
		}
		ch.restartSec += sec - ch.killSec
		ch.victim, ch.killedAt = victim, time.Now()
		old, wait := victim.n, victim.wait
		victim.n = nil
		victim.stop() // a crash: its workers stop with it
		ch.closed = make(chan struct{})
		go func() {
			defer close(ch.closed)
			_ = old.Close()
			wait()
		}()
		fmt.Fprintf(out, "t=%-3s  CHAOS: killed the leader %s\n", fmt.Sprintf("%ds", sec), victim.id())
	case ch.victim != nil && ch.victim.n == nil && !ch.restarting && ch.restartedAt.IsZero() && sec >= ch.restartSec:
		ch.restarting = true
		cfg := ch.victim.cfg
		cfg.Join = nil
		for _, m := range members {
			if m != ch.victim {
				cfg.Join = append(cfg.Join, m.cfg.GossipBindAddr)
			}
		}
		go func() {
			<-ch.closed
			ch.restarted <- restartNode(r.ctx, cfg)
		}()
	}
}

// restartNode starts a node again on its data dir and addresses,
// retrying for restartRetry while the old listeners release their
// ports.
func restartNode(ctx context.Context, cfg node.Config) restart {
	deadline := time.Now().Add(restartRetry)
	for {
		n, err := node.New(cfg)
		if err == nil {
			return restart{n: n}
		}
		if time.Now().After(deadline) || !loop.Sleep(ctx, 100*time.Millisecond) {
			return restart{err: err}
		}
	}
}

// recoveredSecond reports the first second of the table (second k covers
// [start+(k-1)s, start+ks)) that begins at or after from, ends by end and
// holds at least need events: its number, and how long after from it
// ended. That is recovery as the table shows it: a burst that makes some
// sliding 1 s window reach the pace earlier does not count. times are
// sorted unix nanos.
func recoveredSecond(times []int64, start, from, end time.Time, need float64) (sec int, after time.Duration, ok bool) {
	k := int(math.Ceil(float64(from.Sub(start))/float64(time.Second))) + 1
	for ; ; k++ {
		lo, hi := start.Add(time.Duration(k-1)*time.Second), start.Add(time.Duration(k)*time.Second)
		if hi.After(end) {
			return 0, 0, false
		}
		i, _ := slices.BinarySearch(times, lo.UnixNano())
		j, _ := slices.BinarySearch(times, hi.UnixNano())
		if float64(j-i) >= need {
			return k, hi.Sub(from), true
		}
	}
}

// printRecovery prints how long the cluster took to admit at least
// recoveredShare of the rate again after the kill and after the
// restart, and when it reached the rate the leader grants while the node
// is down: (N-1)/N of it, as the dead node's share stays reserved for it.
func printRecovery(w io.Writer, ch *chaosPlan, events []timeline.Event, start, end time.Time, rate float64, nodes int) {
	if ch.victim == nil {
		fmt.Fprintf(w, "recovery: the run ended before the kill (planned at t=%ds)\n", ch.killSec)
		return
	}
	times := make([]int64, len(events))
	for i, e := range events {
		times[i] = e.At
	}
	slices.Sort(times)
	need := recoveredShare * rate
	after := func(from time.Time, event string) string {
		if k, d, ok := recoveredSecond(times, start, from, end, need); ok {
			return fmt.Sprintf("in the second ending t=%ds, %.1fs after the %s", k, d.Seconds(), event)
		}
		return "in no full second of the run after the " + event
	}
	var b strings.Builder
	fmt.Fprintf(&b, "recovery (the first full second of the table at >= %.0f%% of %s/s): %s",
		100*recoveredShare, formatRate(rate), after(ch.killedAt, "kill"))
	if ch.restartedAt.IsZero() {
		b.WriteString("; no restart within the run\n")
	} else {
		fmt.Fprintf(&b, "; %s\n", after(ch.restartedAt, "restart"))
	}
	if nodes > 1 {
		downEnd := end
		if !ch.restartedAt.IsZero() {
			downEnd = ch.restartedAt
		}
		id := ch.victim.id()
		degraded := rate * float64(nodes-1) / float64(nodes)
		fmt.Fprintf(&b, "degraded: while %s was down the others admitted at most %d/%d of the rate (%.1f/s): they\n",
			id, nodes-1, nodes, degraded)
		fmt.Fprintf(&b, "  keep %s's 1/%d for %s, which for all they know is pacing its own callers at that\n", id, nodes, id)
		need := recoveredShare * degraded
		if k, d, ok := recoveredSecond(times, start, ch.killedAt, downEnd, need); ok {
			fmt.Fprintf(&b, "  share (fallback, DESIGN 5); the cluster was back to %.0f%% of that in the second ending\n  t=%ds, %.1fs after the kill\n",
				100*recoveredShare, k, d.Seconds())
		} else {
			fmt.Fprintf(&b, "  share (fallback, DESIGN 5); the cluster did not get back to %.0f%% of that while %s was down\n",
				100*recoveredShare, id)
		}
	}
	io.WriteString(w, b.String())
}
