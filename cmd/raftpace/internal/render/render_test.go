package render

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node/report"
)

func sampleStatus() report.Status {
	return report.Status{
		ID: "n1", Addr: "10.0.0.1:7400", GossipAddr: "10.0.0.1:7401", State: "Leader", Leader: "n1", Granting: true,
		Mode: "raft", Fraction: 1.0 / 3, HeldFraction: 2.0 / 3, Term: 4, AppliedIndex: 1234,
		Members: []report.MemberStatus{
			{ID: "n1", Addr: "10.0.0.1:7400", Role: "voter", Health: "alive", Leader: true, Fraction: 1.0 / 3, ShareHeld: true, Mode: "raft", LastContact: 210 * time.Millisecond},
			{ID: "n2", Addr: "10.0.0.2:7400", Role: "voter", Health: "alive", Fraction: 1.0 / 3, ShareHeld: true, Mode: "raft", LastContact: 640 * time.Millisecond},
			{ID: "n3", Addr: "10.0.0.3:7400", Role: "voter", Health: "failed", Fraction: 1.0 / 3, Mode: "fallback", LastContact: 14 * time.Second},
		},
		Limits: []report.LimitStatus{
			{Key: "image-host", Rate: 20, Burst: 2, Admitted10s: 6.6, Granted10s: 13.3},
			{Key: "llm", Rate: 5, Burst: 1, Admitted10s: 0, Granted10s: 3.2},
		},
		Pauses: []report.PauseStatus{{Key: "llm", Remaining: 12300 * time.Millisecond}},
		Caps:   []report.CapStatus{{Key: "llm", Max: 8, InUse: 3}, {Key: "tenant:42", Max: 2, InUse: 2}},
	}
}

func TestPrintStatus_Leader(t *testing.T) {
	var b bytes.Buffer
	Status(&b, sampleStatus())
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"Node:           n1 (Leader, granting)\n",
		"Leader:         n1, term 4\n",
		"Mode:           raft, ready\n",
		"Fractions:      its own 0.333, held 0.667",
		"ID  ADDR           ROLE   HEALTH  LEADER  MODE      SHARE     FRACTION  LAST CONTACT\n",
		"n1  10.0.0.1:7400  voter  alive   *       raft      held      0.333     210ms ago\n",
		"n3  10.0.0.3:7400  voter  failed          fallback  not held  0.333     14s ago\n",
		"KEY         RATE  BURST  ADMITTED 10s  FLEET 10s  PAUSED  SLOTS\n",
		"image-host  20/s  2      6.60/s        13.3/s     -       -\n",
		"llm         5/s   1      0/s           3.20/s     12.3s   3/8\n",
		"tenant:42   -     -      -             -          -       2/2\n",
		"FLEET 10s: slots/s this leader granted to the whole fleet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
}

func TestPrintStatus_Follower(t *testing.T) {
	st := sampleStatus()
	st.ID, st.State, st.Granting, st.HeldFraction, st.Mode = "n2", "Follower", false, 0, "local"
	for i := range st.Members {
		st.Members[i].LastContact, st.Members[i].ShareHeld, st.Members[i].Mode = 0, false, ""
	}
	st.Members[1].Mode = "local"
	var b bytes.Buffer
	Status(&b, st)
	out := b.String()
	for _, want := range []string{
		"Mode:           local, ready\n",
		"Fraction:       0.333 (its fallback share",
		"n1  10.0.0.1:7400  voter  alive   *       -      -      0.333     -\n",
		"n2  10.0.0.2:7400  voter  alive           local  -      0.333     -\n",
		"(mode of the other members, share and last contact: the leader's view; ask the leader)",
		"KEY         RATE  BURST  ADMITTED 10s  PAUSED  SLOTS\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FLEET") {
		t.Error("a follower shows fleet-wide rates")
	}
}
