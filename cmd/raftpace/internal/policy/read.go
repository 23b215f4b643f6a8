// Package policy reads the policy file (limits and caps by key, JSON),
// works out what applying it to a cluster would change, and applies it
// through whatever sets a key (the admin API's client). It checks a file
// by the rules the cluster applies, so a mistake is refused before
// anything is sent, and names every problem in the operator's words.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/raftpace/raftpace/fsm"
)

// File is a policy document: the limits and caps an agent registers at
// start-up (--policy) and `raftpace limit apply` sets.
type File struct {
	Limits map[string]Limit `json:"limits"`
	Caps   map[string]int   `json:"caps"`
}

// Limit is a limit as the file writes it.
type Limit struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
	Mode  string  `json:"mode,omitempty"`  // "enforce" (or left out) or "dry-run", as limit set --mode
	Quota string  `json:"quota,omitempty"` // "N/PERIOD" (or left out), as limit set --quota
}

// Limit is the limit the file means: a burst left out (0) is 1, a mode
// left out is enforce; anything else is as written, for Read to check.
func (l Limit) Limit() fsm.Limit {
	if l.Burst == 0 {
		l.Burst = 1
	}
	out := fsm.Limit{Rate: l.Rate, Burst: l.Burst, DryRun: l.Mode == ModeDryRun}
	if l.Quota != "" {
		out.Quota, out.Per, _ = fsm.ParseQuota(l.Quota) // Read names a bad one
	}
	return out
}

// The modes of a limit, as the file and `limit set --mode` write them.
const (
	ModeEnforce = "enforce"
	ModeDryRun  = "dry-run"
)

// Read reads and checks a policy file: every key, limit and cap, with the
// rules the cluster applies, every problem at once.
func Read(path string) (File, error) {
	var p File
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return p, fmt.Errorf("%s: trailing data after the JSON object", path)
	}
	var errs []error
	for k, l := range p.Limits {
		if err := fsm.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: limits: %s", path, strings.TrimPrefix(err.Error(), "fsm: ")))
			continue
		}
		lim := l.Limit()
		problems := append(lim.Explain("rate", "burst"), lim.ExplainQuota("quota")...)
		if _, _, err := fsm.ParseQuota(l.Quota); l.Quota != "" && err != nil {
			problems = append(problems, strings.TrimPrefix(err.Error(), "invalid limit: "))
		}
		if err := fsm.CheckMinRate(l.Rate); len(problems) == 0 && err != nil {
			problems = append(problems, err.Error())
		}
		if l.Mode != "" && l.Mode != ModeEnforce && l.Mode != ModeDryRun {
			problems = append(problems, fmt.Sprintf("mode %q: must be %s or %s", l.Mode, ModeEnforce, ModeDryRun))
		}
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%s: limit %q: %s", path, k, p))
		}
	}
	for k, c := range p.Caps {
		if err := fsm.ValidateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: caps: %s", path, strings.TrimPrefix(err.Error(), "fsm: ")))
		} else if c < 1 || c > fsm.MaxCap {
			errs = append(errs, fmt.Errorf("%s: cap %q: %d must be 1..%d", path, k, c, fsm.MaxCap))
		}
	}
	return p, errors.Join(errs...)
}
