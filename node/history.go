package node

import (
	"slices"
	"time"

	"github.com/raftpace/raftpace/node/tally"
)

// HistorySeconds is how far back a node keeps per-second event counts
// (package node/tally counts them: the node's admitted and granted
// histories, what status, the metrics page and its chart show).
const HistorySeconds = tally.HistorySeconds

// KeyHistory is a key's per-second counts for the last Seconds whole
// seconds before End (oldest first). Admitted: events this node granted to
// its own callers. Granted: slots this node granted as leader to the whole
// fleet (leased slots included, whether used or dropped), zero while it
// follows.
type KeyHistory struct {
	Key      string    `json:"key"`
	End      time.Time `json:"end"`
	Admitted []uint64  `json:"admitted"`
	Granted  []uint64  `json:"granted"`
}

// History returns the per-second history of every key this node has seen
// events of, over the last secs seconds (at most HistorySeconds-1).
func (n *Node) History(secs int) []KeyHistory {
	now := time.Now()
	end := now.Truncate(time.Second)
	keys := append(n.admittedHist.Keys(), n.grantedHist.Keys()...)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := make([]KeyHistory, 0, len(keys))
	for _, k := range keys {
		out = append(out, KeyHistory{Key: k, End: end, Admitted: n.admittedHist.Series(k, now, secs), Granted: n.grantedHist.Series(k, now, secs)})
	}
	return out
}
