package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Command types, byte 1 of an encoded command. Values are never reused.
const (
	typeSetLimit       uint8 = 1
	typeDeleteLimit    uint8 = 2
	typeExtendHorizons uint8 = 3
	typeUpsertMember   uint8 = 4
	typeRemoveMember   uint8 = 5
	typeSetPause       uint8 = 6
	typeSetCap         uint8 = 7
	typeDeleteCap      uint8 = 8
	typeAcquireSlots   uint8 = 9
	typeReleaseSlots   uint8 = 10
	// typeSetLimitDryRun is a SetLimit whose limit is in dry run, with
	// SetLimit's fields: an enforced limit encodes as before dry runs
	// existed, and a build without them refuses a dry run it cannot honour
	// (ErrUnknownCommand) instead of enforcing it.
	typeSetLimitDryRun uint8 = 11
	// typeSetLimitQuota is a SetLimit with a quota: SetLimit's fields, the
	// dry-run flag, Quota and Per. A limit without a quota encodes as
	// before quotas existed; a build without them refuses one it could not
	// honour (ErrUnknownCommand) instead of granting past the quota.
	typeSetLimitQuota uint8 = 12
	typeCommitQuotas  uint8 = 13
)

// Command is one entry of the replicated log. The set is closed: it is
// exactly SetLimit, DeleteLimit, ExtendHorizons, UpsertMember,
// RemoveMember, SetPause, SetCap, DeleteCap, AcquireSlots, ReleaseSlots
// and CommitQuotas.
// Decode returns the value types; Encode and State.Apply accept the values
// or non-nil pointers to them.
type Command interface{ commandType() uint8 }

// SetLimit creates the limit of Key or replaces it.
type SetLimit struct {
	Key   string
	Limit Limit
}

// DeleteLimit removes the limit of Key (a no-op if it has none). The key's
// committed horizon stays: see State.
type DeleteLimit struct {
	Key string
}

// HorizonEntry sets the committed horizon of Key to Ahead past the moment
// each replica applies the entry. Ahead is >= 0 and <= MaxHorizonAhead;
// 0 removes the key's horizon (see State).
type HorizonEntry struct {
	Key   string
	Ahead time.Duration
}

// ExtendHorizons moves the committed horizons of many keys in one log entry.
// It holds 1..MaxHorizonEntries entries with distinct keys. A key need not
// have a limit (its limit may have been deleted while the entry was in
// flight).
type ExtendHorizons struct {
	Entries []HorizonEntry
}

// UpsertMember adds the member Member.ID or replaces it.
type UpsertMember struct {
	Member Member
}

// RemoveMember removes the member ID (a no-op if there is none).
type RemoveMember struct {
	ID string
}

// SetPause sets the refusal pause of Key to For past the moment each
// replica applies the entry (the node measures; State stores the
// duration). For is >= 0 and <= MaxPause; 0 clears the pause. The latest
// entry for a key overwrites the earlier ones: see State.
type SetPause struct {
	Key string
	For time.Duration
}

// SetCap creates the fleet-wide concurrency cap of Key or replaces it: at
// most Max slots on Key held at once. Max is >= 1 and <= MaxCap.
type SetCap struct {
	Key string
	Max int
}

// DeleteCap removes the concurrency cap of Key (a no-op if it has none).
// Slots held on Key stay until released.
type DeleteCap struct {
	Key string
}

// AcquireSlots records one held concurrency slot, ID, held by the member
// Holder on each of Keys, for TTL past the moment each replica applies the
// entry. ID and Holder follow ValidateID; Keys holds 1..MaxSlotKeys
// distinct keys; TTL is > 0 and <= MaxSlotTTL. If ID is already held the
// entry changes nothing (a retried proposal). Apply does not check the caps
// of Keys: see State.
type AcquireSlots struct {
	ID     string
	Holder string
	Keys   []string
	TTL    time.Duration
}

// ReleaseSlots removes the held slots IDs: 1..MaxReleaseIDs distinct ids.
// An id that is not held is ignored (it may have been released already).
type ReleaseSlots struct {
	IDs []string
}

func (c SetLimit) commandType() uint8 {
	if c.Limit.Quota != 0 || c.Limit.Per != 0 {
		return typeSetLimitQuota
	}
	if c.Limit.DryRun {
		return typeSetLimitDryRun
	}
	return typeSetLimit
}
func (DeleteLimit) commandType() uint8    { return typeDeleteLimit }
func (ExtendHorizons) commandType() uint8 { return typeExtendHorizons }
func (UpsertMember) commandType() uint8   { return typeUpsertMember }
func (RemoveMember) commandType() uint8   { return typeRemoveMember }
func (SetPause) commandType() uint8       { return typeSetPause }
func (SetCap) commandType() uint8         { return typeSetCap }
func (DeleteCap) commandType() uint8      { return typeDeleteCap }
func (AcquireSlots) commandType() uint8   { return typeAcquireSlots }
func (ReleaseSlots) commandType() uint8   { return typeReleaseSlots }
func (CommitQuotas) commandType() uint8   { return typeCommitQuotas }

// commandName is the Go type name, for error messages.
func commandName(t uint8) string {
	switch t {
	case typeSetLimit, typeSetLimitDryRun, typeSetLimitQuota:
		return "SetLimit"
	case typeCommitQuotas:
		return "CommitQuotas"
	case typeDeleteLimit:
		return "DeleteLimit"
	case typeExtendHorizons:
		return "ExtendHorizons"
	case typeUpsertMember:
		return "UpsertMember"
	case typeRemoveMember:
		return "RemoveMember"
	case typeSetPause:
		return "SetPause"
	case typeSetCap:
		return "SetCap"
	case typeDeleteCap:
		return "DeleteCap"
	case typeAcquireSlots:
		return "AcquireSlots"
	case typeReleaseSlots:
		return "ReleaseSlots"
	}
	return fmt.Sprintf("type %d", t)
}

// deref turns a pointer command into its value, so the rest of the
// package switches on values only. Every command is a struct type of this
// package with value methods, so a pointer to one is a pointer to a
// Command.
func deref(c Command) (Command, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil command", ErrInvalidCommand)
	}
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer {
		return c, nil
	}
	if v.IsNil() {
		return nil, fmt.Errorf("%w: nil %T", ErrInvalidCommand, c)
	}
	return v.Elem().Interface().(Command), nil
}

// validate checks the fields of a value command. Errors name the field and
// wrap its sentinel; callers add ErrInvalidCommand and the command name.
func validate(c Command) error {
	switch c := c.(type) {
	case SetLimit:
		return errors.Join(append([]error{validateKey(c.Key)}, c.Limit.problems()...)...)
	case DeleteLimit:
		return validateKey(c.Key)
	case ExtendHorizons:
		return validateEntries(c.Entries, func(e HorizonEntry) string { return e.Key }, func(e HorizonEntry) error { return validateAhead(e.Ahead) })
	case UpsertMember:
		return errors.Join(c.Member.problems()...)
	case RemoveMember:
		return validateName(ErrInvalidID, c.ID, MaxIDLen)
	case SetPause:
		return errors.Join(validateKey(c.Key), validatePause(c.For))
	case SetCap:
		return errors.Join(validateKey(c.Key), validateCap(c.Max))
	case DeleteCap:
		return validateKey(c.Key)
	case AcquireSlots:
		return validateSlot(c.ID, Slot{Holder: c.Holder, Keys: c.Keys, TTL: c.TTL})
	case ReleaseSlots:
		return validateReleaseIDs(c.IDs)
	case CommitQuotas:
		return validateEntries(c.Entries, func(e QuotaEntry) string { return e.Key }, func(e QuotaEntry) error { return e.QuotaCount.Validate() })
	}
	return fmt.Errorf("%w: %T", ErrUnknownCommand, c)
}

// validateEntries checks the entries of a command that moves many keys at
// once (ExtendHorizons, CommitQuotas): 1..MaxHorizonEntries of them, each
// key valid and named once, each entry's value valid (check).
func validateEntries[E any](es []E, key func(E) string, check func(E) error) error {
	if len(es) == 0 || len(es) > MaxHorizonEntries {
		return fmt.Errorf("%d entries: must be 1..%d (MaxHorizonEntries)", len(es), MaxHorizonEntries)
	}
	for i, e := range es {
		if err := validateKey(key(e)); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if err := check(e); err != nil {
			return fmt.Errorf("entry %d key %s: %w", i, quote(key(e)), err)
		}
	}
	if i, j, ok := firstDuplicate(es, key); ok {
		return dupErr(i, j, key(es[j]))
	}
	return nil
}

func dupErr(first, second int, key string) error {
	return fmt.Errorf("entries %d and %d: duplicate key %s: keys must be unique within one command", first, second, quote(key))
}

// checkCommand validates c (value or pointer) and returns its value form.
func checkCommand(c Command) (Command, error) {
	c, err := deref(c)
	if err != nil {
		return nil, err
	}
	if err := validate(c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCommand, commandName(c.commandType()), err)
	}
	return c, nil
}
