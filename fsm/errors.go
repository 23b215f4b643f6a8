package fsm

import "errors"

// Sentinel errors. Every error this package returns wraps one or more of
// these; test for them with errors.Is. The wrapping error starts with
// "fsm: " and names what was wrong (the field, its value and the rule).
var (
	// ErrInvalidKey: a limit key breaks the rules of ValidateKey.
	ErrInvalidKey = errors.New("invalid key")

	// ErrInvalidID: a node id breaks the rules of ValidateID.
	ErrInvalidID = errors.New("invalid id")

	// ErrInvalidLimit: a Limit's Rate or Burst is out of range.
	ErrInvalidLimit = errors.New("invalid limit")

	// ErrInvalidMember: a Member's Addr or Fraction is invalid (its ID
	// reports ErrInvalidID).
	ErrInvalidMember = errors.New("invalid member")

	// ErrInvalidCommand: a command is malformed. Decode returns it for bytes
	// that are not exactly one canonical version-1 encoding; Encode, Decode
	// and State.Apply return it (together with the field's own sentinel,
	// such as ErrInvalidKey) for a command whose fields fail validation.
	ErrInvalidCommand = errors.New("invalid command")

	// ErrUnknownCommand: Decode found a command type this version does not
	// know (a newer codec may have added it).
	ErrUnknownCommand = errors.New("unknown command type")

	// ErrStaleIndex: State.Apply was given a log index that is not above the
	// index it last applied. Raft never does this; it guards against
	// applying one entry twice.
	ErrStaleIndex = errors.New("log index not above applied index")

	// ErrInvalidSnapshot: State.Restore read bytes that are not a valid
	// snapshot (bad magic, version, checksum, truncation, trailing bytes,
	// unsorted or invalid entries, or larger than MaxSnapshotSize).
	ErrInvalidSnapshot = errors.New("invalid snapshot")
)
