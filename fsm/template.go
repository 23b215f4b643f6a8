package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// Wildcard ends a template's key. A limit whose key ends in it is a
// template: it gives its limit to every key that starts with the part
// before the wildcard and has no limit of its own, without a command per
// key ("tenant:*" covers "tenant:42" as soon as it is first used).
// Explicit limits beat templates; among templates the longest prefix
// wins, so "tenant:eu:*" beats "tenant:*" for "tenant:eu:7", and "*" alone
// covers every key. A wildcard anywhere else in a key is an ordinary
// character.
//
// Templates are limits like any other in the state, the commands and the
// snapshot (SetLimit, DeleteLimit): only State.Limit's lookup knows them.
// A key ending in the wildcard names a template, never an event: a node
// refuses reservations for it.
const Wildcard = "*"

// IsTemplate reports whether key names a template: it ends in Wildcard.
func IsTemplate(key string) bool { return strings.HasSuffix(key, Wildcard) }

// ValidateEventKey reports whether key may name the key of an event (a
// reservation): ValidateKey's rules, and not a template's key. The error
// wraps ErrInvalidKey.
func ValidateEventKey(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if IsTemplate(key) {
		return prefix(fmt.Errorf("%w %s: ends in %q, so it names a template, not an event's key", ErrInvalidKey, quote(key), Wildcard))
	}
	return nil
}

// templateOrder sorts template keys so that the first match is the most
// specific: longest prefix first, then by bytes (two templates of one
// length cannot both match a key, so that order is only for determinism).
func templateOrder(a, b string) int {
	if len(a) != len(b) {
		return len(b) - len(a)
	}
	return strings.Compare(a, b)
}

// indexTemplates rebuilds s.templates from s.limits. Callers hold s.mu for
// writing.
func (s *State) indexTemplates() {
	s.templates = s.templates[:0]
	for key := range s.limits {
		if IsTemplate(key) {
			s.templates = append(s.templates, key)
		}
	}
	slices.SortFunc(s.templates, templateOrder)
}

// templateFor returns the template whose limit key gets: the one with the
// longest prefix of key. Callers hold s.mu.
func (s *State) templateFor(key string) (string, bool) {
	for _, t := range s.templates {
		if strings.HasPrefix(key, t[:len(t)-len(Wildcard)]) {
			return t, true
		}
	}
	return "", false
}

// LimitFrom returns the limit of key and where it comes from: key itself
// when it has an explicit limit (or is a template), else the template that
// covers it. ok is false when neither gives key a limit.
func (s *State) LimitFrom(key string) (lim Limit, from string, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if lim, ok = s.limits[key]; ok || IsTemplate(key) {
		return lim, key, ok
	}
	if from, ok = s.templateFor(key); ok {
		return s.limits[from], from, true
	}
	return Limit{}, "", false
}

// LimitKey returns the key of the limit key gets: key itself, or the
// template covering it; key when nothing gives it a limit. A node counts a
// key's events under it, so a template's keys, however many, are one row
// in its counters, histories and metrics.
func (s *State) LimitKey(key string) string {
	if _, from, ok := s.LimitFrom(key); ok {
		return from
	}
	return key
}

// Templates returns the template keys, most specific first (the order in
// which State.Limit tries them).
func (s *State) Templates() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.templates)
}
