package fsm

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"
)

// A key's limit is its own, else the most specific template's; a
// template's key gets the template's own limit; deleting a key's own limit
// leaves it the template's, deleting the template leaves it none.
func TestState_TemplateLookup(t *testing.T) {
	s := New()
	mustApply(t, s, 1, SetLimit{Key: "tenant:*", Limit: lim(5, 5)})
	mustApply(t, s, 2, SetLimit{Key: "tenant:eu:*", Limit: lim(2, 1)})
	mustApply(t, s, 3, SetLimit{Key: "tenant:eu:7", Limit: lim(9, 9)})
	mustApply(t, s, 4, SetLimit{Key: "a*b", Limit: lim(1, 1)}) // a wildcard inside is an ordinary character

	for _, tt := range []struct {
		key, from string
		want      Limit
		ok        bool
	}{
		{"tenant:42", "tenant:*", lim(5, 5), true},
		{"tenant:", "tenant:*", lim(5, 5), true},
		{"tenant:eu:1", "tenant:eu:*", lim(2, 1), true},
		{"tenant:eu:7", "tenant:eu:7", lim(9, 9), true},
		{"tenant:*", "tenant:*", lim(5, 5), true},
		{"tenant:eu:*", "tenant:eu:*", lim(2, 1), true},
		{"tenant:us:*", "tenant:us:*", Limit{}, false}, // a template's key is never covered by another
		{"tenant", "", Limit{}, false},
		{"a*b", "a*b", lim(1, 1), true},
		{"a*bc", "", Limit{}, false},
		{"other", "", Limit{}, false},
	} {
		got, from, ok := s.LimitFrom(tt.key)
		if got != tt.want || from != tt.from || ok != tt.ok {
			t.Errorf("LimitFrom(%q) = %v, %q, %v; want %v, %q, %v", tt.key, got, from, ok, tt.want, tt.from, tt.ok)
		}
		if got, ok := s.Limit(tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Limit(%q) = %v, %v; want %v, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	if got, want := s.Templates(), []string{"tenant:eu:*", "tenant:*"}; !slices.Equal(got, want) {
		t.Errorf("Templates() = %q, want %q", got, want)
	}

	mustApply(t, s, 5, DeleteLimit{Key: "tenant:eu:7"})
	if got, ok := s.Limit("tenant:eu:7"); !ok || got != lim(2, 1) {
		t.Errorf("after deleting its own limit: %v, %v; want the template's 2/s", got, ok)
	}
	mustApply(t, s, 6, DeleteLimit{Key: "tenant:eu:*"})
	if got, ok := s.Limit("tenant:eu:7"); !ok || got != lim(5, 5) {
		t.Errorf("after deleting tenant:eu:*: %v, %v; want tenant:*'s 5/s", got, ok)
	}
	mustApply(t, s, 7, SetLimit{Key: "*", Limit: lim(1, 2)})
	if got, ok := s.Limit("anything"); !ok || got != lim(1, 2) {
		t.Errorf(`"*" covers every key: %v, %v`, got, ok)
	}

	// The index of templates is rebuilt from a snapshot.
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Templates(), []string{"tenant:*", "*"}; !slices.Equal(got, want) {
		t.Errorf("restored Templates() = %q, want %q", got, want)
	}
	if got, from, _ := r.LimitFrom("tenant:eu:7"); got != lim(5, 5) || from != "tenant:*" {
		t.Errorf("restored LimitFrom(tenant:eu:7) = %v from %q", got, from)
	}
}

// A horizon entry with Ahead 0 removes the key's horizon, so an equal state
// encodes equally with or without the key ever having had one.
func TestState_ZeroAheadForgets(t *testing.T) {
	s := New()
	mustApply(t, s, 1, horizons(HorizonEntry{"a", time.Second}, HorizonEntry{"b", time.Second}))
	mustApply(t, s, 2, horizons(HorizonEntry{"a", 0}, HorizonEntry{"c", 0}))
	if _, ok := s.Horizon("a"); ok {
		t.Error("a's horizon kept after Ahead 0")
	}
	if d, ok := s.Horizon("b"); !ok || d != time.Second {
		t.Errorf("b's horizon = %v, %v; want 1s", d, ok)
	}
	other := New()
	mustApply(t, other, 1, horizons(HorizonEntry{"b", time.Second}))
	mustApply(t, other, 2, DeleteLimit{Key: "none"})
	if !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, other)) {
		t.Error("states equal but for a forgotten horizon encode differently")
	}
}

func TestValidateEventKey(t *testing.T) {
	for _, key := range []string{"k", "a*b", "*a"} {
		if err := ValidateEventKey(key); err != nil {
			t.Errorf("ValidateEventKey(%q) = %v, want nil", key, err)
		}
	}
	for _, key := range []string{"", "tenant:*", "*", "a b"} {
		err := ValidateEventKey(key)
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateEventKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if err := ValidateEventKey("tenant:*"); err == nil || !bytes.Contains([]byte(err.Error()), []byte("names a template")) {
		t.Errorf("error %v does not say it names a template", err)
	}
}
