package fsm

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"strconv"
	"time"
	"unicode/utf8"
)

// Bounds on input. They are part of the replicated contract:
// changing one changes which commands every replica accepts.
const (
	MaxKeyLen         = 256       // bytes in a limit key
	MaxIDLen          = 128       // bytes in a node id
	MaxAddrLen        = 256       // bytes in a member address
	MaxRate           = 1e9       // events per second
	MaxBurst          = 1_000_000 // events
	MaxHorizonAhead   = time.Hour // largest HorizonEntry.Ahead
	MaxHorizonEntries = 65536     // entries in one ExtendHorizons
	MaxSnapshotSize   = 256 << 20 // bytes State.Restore reads at most
)

// Bounds on pauses, caps and slots, part of the replicated contract like
// the ones above.
const (
	MaxPause      = 24 * time.Hour // largest SetPause.For
	MaxCap        = 1_000_000      // largest SetCap.Max: slots held on a key at once
	MaxSlotKeys   = 16             // keys in one AcquireSlots
	MaxSlotTTL    = time.Hour      // largest AcquireSlots.TTL
	MaxReleaseIDs = 4096           // slot ids in one ReleaseSlots
)

const (
	quoteMax         = 48               // bytes of a bad key quoted in an error
	maxExactQuotient = float64(1 << 52) // see Limit.Interval
)

// ValidateKey reports whether key may name a limit. A key is 1 to MaxKeyLen
// bytes of valid UTF-8 with no whitespace, no control characters and no
// invisible formatting characters (zero-width, bidirectional controls, byte
// order mark): keys appear in space-separated timeline files and in log lines.
//
// The error wraps ErrInvalidKey, names the rule and quotes the key
// (truncated if long).
//
// The character classes are fixed lists in this package, not the Unicode
// tables of the Go release that built the binary, so every replica accepts
// exactly the same keys whatever toolchain built it.
func ValidateKey(key string) error {
	return prefix(validateName(ErrInvalidKey, key, MaxKeyLen))
}

// ValidateID reports whether id may name a node (it is also the raft server
// ID). The rules are those of ValidateKey with a limit of MaxIDLen bytes;
// the error wraps ErrInvalidID.
func ValidateID(id string) error {
	return prefix(validateName(ErrInvalidID, id, MaxIDLen))
}

// validateKey is ValidateKey without the package prefix.
func validateKey(key string) error { return validateName(ErrInvalidKey, key, MaxKeyLen) }

// prefix marks an error as this package's for callers outside it.
// Internally errors carry no prefix, so that nesting does not repeat it.
func prefix(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("fsm: %w", err)
}

// prefixAll prefixes each error and joins them.
func prefixAll(errs []error) error {
	for i, err := range errs {
		errs[i] = prefix(err)
	}
	return errors.Join(errs...)
}

func validateName(sentinel error, s string, maxLen int) error {
	if s == "" {
		return fmt.Errorf("%w %s: must not be empty", sentinel, quote(s))
	}
	if len(s) > maxLen {
		return fmt.Errorf("%w %s: %d bytes, longer than the maximum %d", sentinel, quote(s), len(s), maxLen)
	}
	if err := checkChars(s); err != nil {
		return fmt.Errorf("%w %s: %w", sentinel, quote(s), err)
	}
	return nil
}

// checkChars enforces the character rules shared by keys, ids and
// addresses.
func checkChars(s string) error {
	for i := 0; i < len(s); {
		if c := s[i]; c > ' ' && c < 0x7F { // printable ASCII other than space
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("invalid UTF-8 at byte %d", i)
		case isSpace(r):
			return fmt.Errorf("contains whitespace %U at byte %d", r, i)
		case isControl(r):
			return fmt.Errorf("contains control character %U at byte %d", r, i)
		case isInvisibleFormat(r):
			return fmt.Errorf("contains invisible formatting character %U at byte %d", r, i)
		}
		i += size
	}
	return nil
}

// isSpace is the Unicode White_Space property, spelled out so that it cannot
// change with the Go release (it equals unicode.IsSpace as of Unicode 15).
func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0,
		0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// isControl is Unicode category Cc (C0, DEL and C1).
func isControl(r rune) bool {
	return r < 0x20 || (r >= 0x7F && r <= 0x9F)
}

// isInvisibleFormat covers the format characters that render as nothing
// or reorder text: they would make two different keys look the same in a
// log line.
func isInvisibleFormat(r rune) bool {
	switch {
	case r == 0xAD, // soft hyphen
		r >= 0x200B && r <= 0x200F, // zero-width space/joiners, LRM, RLM
		r >= 0x202A && r <= 0x202E, // bidi embeddings and overrides
		r >= 0x2060 && r <= 0x2064, // word joiner, invisible operators
		r >= 0x2066 && r <= 0x206F, // bidi isolates, deprecated format
		r == 0xFEFF:                // byte order mark
		return true
	}
	return false
}

// quote renders s for an error message: Go-quoted, cut to at most quoteMax
// bytes (on a rune boundary when s is valid UTF-8), with its length when cut.
func quote(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	cut := quoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..." + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// Limit is the pace of one key: on average at most Rate events per second,
// with up to Burst events at once after a quiet spell. Across the whole
// cluster, any window of length W admits at most Rate*W + Burst events
// (plus the grant-delivery allowance documented by package node).
//
// A limit in dry run (DryRun) is paced like any other, but a node admits
// every event of its keys at once and counts those the limit would have
// delayed or refused, so an operator can watch a new limit before
// enforcing it. The bound above then holds for the limit's own grants,
// not for what the callers send.
//
// The zero Limit is invalid; use Validate before relying on one.
type Limit struct {
	Rate   float64 // events per second: finite, > 0, <= MaxRate
	Burst  int     // >= 1, <= MaxBurst
	DryRun bool    // admit everything; count what would have waited
	// Quota, when > 0, is a budget of events per calendar window of Per
	// (UTC, on the leader's clock: see quota.go), beside the rate.
	Quota int64
	Per   Period
}

// Validate reports every problem with l at once (errors.Join). Each error
// wraps ErrInvalidLimit and names the field, its value and the rule.
func (l Limit) Validate() error {
	return prefixAll(l.problems())
}

func (l Limit) problems() []error {
	var errs []error
	for _, p := range append(l.Explain("Rate", "Burst"), l.ExplainQuota("Quota")...) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidLimit, p))
	}
	return errs
}

// Explain returns every rule l breaks, each naming its field as rate and
// burst call it (Validate's "Rate" and "Burst"; a command line's
// "--rate" and "--burst"): "--rate -1: must be > 0". None when l is valid.
func (l Limit) Explain(rate, burst string) []string {
	var out []string
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		out = append(out, fmt.Sprintf("%s %v: must be finite", rate, l.Rate))
	case l.Rate <= 0:
		out = append(out, fmt.Sprintf("%s %v: must be > 0", rate, l.Rate))
	case l.Rate > MaxRate:
		out = append(out, fmt.Sprintf("%s %v: must be <= %v (MaxRate)", rate, l.Rate, float64(MaxRate)))
	}
	switch {
	case l.Burst < 1:
		out = append(out, fmt.Sprintf("%s %d: must be >= 1", burst, l.Burst))
	case l.Burst > MaxBurst:
		out = append(out, fmt.Sprintf("%s %d: must be <= %d (MaxBurst)", burst, l.Burst, MaxBurst))
	}
	return out
}

// Interval returns the emission interval T = 1/Rate: the smallest whole
// number of nanoseconds n with n*Rate >= 1e9, computed exactly on the
// float64 value of Rate (so it is rounded up, never down: pacing at T never
// exceeds Rate). It is at least 1ns; a Rate too small for a time.Duration
// (below about one event per 292 years) gives the largest Duration.
//
// For an invalid Limit: a Rate that is NaN or <= 0 gives the largest
// Duration (admit nothing), a Rate above 1e9 gives 1ns.
func (l Limit) Interval() time.Duration {
	r := l.Rate
	if !(r > 0) { // NaN, zero, negative
		return math.MaxInt64
	}
	if r >= 1e9 { // includes +Inf
		return 1
	}
	q := 1e9 / r
	if q < maxExactQuotient {
		// q is within half a unit of the exact quotient, so the answer is
		// ceil(q) or one either side; FMA gives the exact sign of n*r - 1e9.
		n := math.Ceil(q)
		if n > 1 && math.FMA(n-1, r, -1e9) >= 0 {
			n--
		} else if math.FMA(n, r, -1e9) < 0 {
			n++
		}
		return time.Duration(n)
	}
	// Rates below ~2.2e-7/s: exact rational arithmetic, then saturate.
	rat := new(big.Rat).SetFloat64(r)
	rat.Inv(rat).Mul(rat, new(big.Rat).SetInt64(1e9))
	quo, rem := new(big.Int).QuoRem(rat.Num(), rat.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		quo.Add(quo, big.NewInt(1))
	}
	if !quo.IsInt64() {
		return math.MaxInt64
	}
	return time.Duration(quo.Int64())
}

// Member is one node of the cluster as the replicated state knows it.
type Member struct {
	ID       string  // node id, see ValidateID; also the raft server ID
	Addr     string  // raft and RPC address, host:port
	Fraction float64 // fallback fraction f_i in [0, 1]
}

// Validate reports every problem with m at once (errors.Join): the ID must
// pass ValidateID (ErrInvalidID); Addr must be host:port with a non-empty
// host, a decimal port in 1..65535, at most MaxAddrLen bytes and the
// character rules of ValidateKey; Fraction must be in [0, 1]
// (ErrInvalidMember).
//
// That the fractions of all members sum to at most 1 is a cluster-wide
// invariant the node maintains when it changes them; Validate sees one
// member only.
func (m Member) Validate() error {
	return prefixAll(m.problems())
}

func (m Member) problems() []error {
	var errs []error
	if err := validateName(ErrInvalidID, m.ID, MaxIDLen); err != nil {
		errs = append(errs, err)
	}
	if err := validateAddr(m.Addr); err != nil {
		errs = append(errs, fmt.Errorf("%w: Addr %s: %w", ErrInvalidMember, quote(m.Addr), err))
	}
	if !(m.Fraction >= 0 && m.Fraction <= 1) { // also catches NaN
		errs = append(errs, fmt.Errorf("%w: Fraction %v: must be in [0, 1]", ErrInvalidMember, m.Fraction))
	}
	return errs
}

func validateAddr(addr string) error {
	if addr == "" {
		return errors.New("must not be empty")
	}
	if len(addr) > MaxAddrLen {
		return fmt.Errorf("%d bytes, longer than the maximum %d", len(addr), MaxAddrLen)
	}
	if err := checkChars(addr); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port: %w", err)
	}
	if host == "" {
		return errors.New("host must not be empty")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || strconv.FormatUint(p, 10) != port {
		return fmt.Errorf("port %q: must be a decimal number in 1..65535", port)
	}
	return nil
}

// validateAhead checks one HorizonEntry.Ahead (0 forgets the horizon).
func validateAhead(d time.Duration) error {
	if d < 0 || d > MaxHorizonAhead {
		return fmt.Errorf("Ahead %v: must be >= 0 and <= %v (MaxHorizonAhead)", d, MaxHorizonAhead)
	}
	return nil
}

// validateStoredAhead checks a horizon of a snapshot: a state holds none
// at 0 (an entry with Ahead 0 removes the key's horizon).
func validateStoredAhead(d time.Duration) error {
	if d == 0 {
		return fmt.Errorf("Ahead %v: a stored horizon must be > 0", d)
	}
	return validateAhead(d)
}

// validatePause checks one SetPause.For (0 clears the pause).
func validatePause(d time.Duration) error {
	if d < 0 || d > MaxPause {
		return fmt.Errorf("For %v: must be >= 0 and <= %v (MaxPause)", d, MaxPause)
	}
	return nil
}

// validateCap checks one SetCap.Max.
func validateCap(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("Max %d: must be >= 1", n)
	case n > MaxCap:
		return fmt.Errorf("Max %d: must be <= %d (MaxCap)", n, MaxCap)
	}
	return nil
}

// validateTTL checks one AcquireSlots.TTL.
func validateTTL(d time.Duration) error {
	if d <= 0 || d > MaxSlotTTL {
		return fmt.Errorf("TTL %v: must be > 0 and <= %v (MaxSlotTTL)", d, MaxSlotTTL)
	}
	return nil
}

// validateSlot checks the fields of a held slot, from an AcquireSlots or a
// snapshot, and reports every problem at once (errors.Join).
func validateSlot(id string, sl Slot) error {
	var errs []error
	if err := validateName(ErrInvalidID, id, MaxIDLen); err != nil {
		errs = append(errs, fmt.Errorf("ID: %w", err))
	}
	if err := validateName(ErrInvalidID, sl.Holder, MaxIDLen); err != nil {
		errs = append(errs, fmt.Errorf("Holder: %w", err))
	}
	if err := validateSlotKeys(sl.Keys); err != nil {
		errs = append(errs, err)
	}
	if err := validateTTL(sl.TTL); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validateSlotKeys(keys []string) error {
	if len(keys) == 0 || len(keys) > MaxSlotKeys {
		return fmt.Errorf("%d keys: must be 1..%d (MaxSlotKeys)", len(keys), MaxSlotKeys)
	}
	for i, k := range keys {
		if err := validateKey(k); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
	}
	if i, j, ok := firstDuplicate(keys, func(k string) string { return k }); ok {
		return fmt.Errorf("keys %d and %d: duplicate key %s: the keys of a slot must be unique", i, j, quote(keys[j]))
	}
	return nil
}

func validateReleaseIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > MaxReleaseIDs {
		return fmt.Errorf("%d ids: must be 1..%d (MaxReleaseIDs)", len(ids), MaxReleaseIDs)
	}
	for i, id := range ids {
		if err := validateName(ErrInvalidID, id, MaxIDLen); err != nil {
			return fmt.Errorf("id %d: %w", i, err)
		}
	}
	if i, j, ok := firstDuplicate(ids, func(id string) string { return id }); ok {
		return fmt.Errorf("ids %d and %d: duplicate id %s: ids must be unique within one command", i, j, quote(ids[j]))
	}
	return nil
}

// firstDuplicate returns the indexes i < j of the first element (by j) whose
// name repeats an earlier one.
func firstDuplicate[E any](es []E, name func(E) string) (i, j int, ok bool) {
	if len(es) <= 16 { // quadratic beats a map for small batches
		for j := 1; j < len(es); j++ {
			for i := 0; i < j; i++ {
				if name(es[i]) == name(es[j]) {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	seen := make(map[string]int, len(es))
	for j, e := range es {
		if i, dup := seen[name(e)]; dup {
			return i, j, true
		}
		seen[name(e)] = j
	}
	return 0, 0, false
}

// MinRate is the slowest rate a limit may be set to: one event per 30
// minutes. A key's slots are granted only under a horizon at most
// MaxHorizonAhead (an hour) ahead, less two HorizonAhead (up to a
// minute each), so a key slower than one event per 58 minutes could never
// be granted at all; the minimum leaves a margin. It is
// checked where a limit enters (node.SetLimit, the CLI), not by Validate: a
// replicated entry must be applied alike by every version of the node.
const MinRate = 1.0 / 1800

// CheckMinRate refuses a rate below MinRate, saying why.
func CheckMinRate(rate float64) error {
	if rate > 0 && rate < MinRate {
		return fmt.Errorf("rate %v/s: below the minimum %.6g/s (one event per 30 min): a slower key could never be granted, its slots lying past the hour a horizon may reach", rate, MinRate)
	}
	return nil
}
