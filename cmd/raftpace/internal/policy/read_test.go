package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Read names every problem of a policy file at once, with the rules
// the cluster would apply (a rate below fsm.MinRate included), so an agent
// refuses it at start-up rather than failing on its first register.
func TestRead(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // "" : valid
	}{
		{"valid", `{"limits":{"a":{"rate":5,"burst":2},"t:*":{"rate":1}},"caps":{"c":3}}`, nil},
		{"every problem", `{"limits":{"a b":{"rate":5},"slow":{"rate":1e-300},"neg":{"rate":-1},"b0":{"rate":1,"burst":-1}},"caps":{"c":0}}`, []string{
			`limits: invalid key "a b"`, `limit "slow": rate 1e-300/s: below the minimum`, `limit "neg": rate -1: must be > 0`, `limit "b0": burst -1: must be >= 1`, `cap "c": 0 must be 1..`}},
		{"unknown field", `{"limit":{}}`, []string{`unknown field "limit"`}},
		{"trailing data", `{} {}`, []string{"trailing data"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.json")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Read accepted %s", tc.doc)
			}
			if strings.Contains(err.Error(), "fsm:") {
				t.Errorf("an internal prefix in front of the operator:\n%v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("a missing file: %v", err)
	}
}
