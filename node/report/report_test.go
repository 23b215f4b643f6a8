package report

import "testing"

func TestReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Status
		ok   bool
	}{
		{"follower with a leader", Status{ID: "a", Leader: "b", Mode: ModeRaft}, true},
		{"no leader", Status{ID: "a", Mode: ModeRaft}, false},
		{"leader before its barrier", Status{ID: "a", Leader: "a", Mode: ModeRaft}, false},
		{"leader granting", Status{ID: "a", Leader: "a", Granting: true, HeldFraction: 0.5, Mode: ModeRaft}, true},
		{"leader holding no share", Status{ID: "a", Leader: "a", Granting: true, Mode: ModeRaft}, false},
		{"local with a fraction", Status{ID: "a", Mode: ModeLocal, Fraction: 0.3}, true},
		{"pooled with a fraction", Status{ID: "a", Mode: ModePooled, Fraction: 0.3}, true},
		{"local without a fraction", Status{ID: "a", Mode: ModeLocal}, false},
		{"stopped", Status{ID: "a", Mode: ModeStopped, Fraction: 0.3}, false},
		{"unknown mode", Status{ID: "a", Leader: "b", Mode: "mode(9)"}, false},
	} {
		ok, reason := tc.st.Ready()
		if ok != tc.ok || (reason == "") != ok {
			t.Errorf("%s: Ready() = %v, %q; want ok %v and a reason exactly when not ok", tc.name, ok, reason, tc.ok)
		}
	}
}
