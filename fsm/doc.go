// Package fsm is the replicated, deterministic state of a raftpace cluster
// and the codec of the commands that change it.
//
// The state (State) holds the limit of each key (a key ending in Wildcard
// is a template whose limit every key under it gets: template.go), the committed horizon of
// each key, the members of the cluster with their fallback fractions, the
// refusal pause of each key, the concurrency cap of each key, the held
// concurrency slots, and the index of the last applied raft log entry.
// Commands (SetLimit, DeleteLimit, ExtendHorizons, UpsertMember,
// RemoveMember, SetPause, SetCap, DeleteCap, AcquireSlots, ReleaseSlots)
// are encoded by Encode into raft log entries and decoded by Decode;
// State.Apply applies one at its log index. Package node wraps State in a
// raft.FSM, because it also records the local time at which each horizon,
// pause and slot entry was applied, and that needs a clock; this package
// reads no clock, does no I/O beyond the snapshot reader and writer, and
// logs nothing.
//
//	b, err := fsm.Encode(fsm.SetLimit{Key: "google-images", Limit: fsm.Limit{Rate: 10, Burst: 5}})
//	// ... b goes through raft; on every replica:
//	c, err := fsm.Decode(entry.Data)
//	err = state.Apply(entry.Index, c)
//
// # Promises
//
// Determinism: replicas that apply the same commands at the same indexes
// hold equal states, and equal states write byte-identical snapshots.
// Apply reads no clock and no randomness, and nothing this package outputs
// depends on map order (snapshots, Members and Slots are sorted).
//
// Validation: keys and node ids follow ValidateKey and ValidateID; limits
// follow Limit.Validate; members follow Member.Validate; an ExtendHorizons
// holds 1..MaxHorizonEntries entries with distinct keys, each with
// 0 <= Ahead <= MaxHorizonAhead (0 forgets); a SetPause has 0 <= For <= MaxPause; a
// SetCap has 1 <= Max <= MaxCap; an AcquireSlots has 1..MaxSlotKeys
// distinct keys and 0 < TTL <= MaxSlotTTL; a ReleaseSlots holds
// 1..MaxReleaseIDs distinct ids. Encode never encodes an invalid command,
// Decode never returns one, and Apply checks again and rejects an invalid
// command without changing anything. Errors wrap the sentinels declared in
// errors.go and name the field, its value and the rule. The character
// rules are fixed lists in this package, not the Unicode tables of the Go
// release, so replicas built with different toolchains agree.
//
// Robustness: Decode and State.Restore never panic on any input, bound
// every length and count by the bytes that remain before allocating, and
// are fuzzed (FuzzDecode, FuzzRestore).
//
// # Command encoding, version 1
//
// Every encoding is canonical: a valid command has exactly one encoding,
// and Decode accepts nothing else (so anything it accepts re-encodes to the
// same bytes).
//
//	byte 0     codec version, 1
//	byte 1     command type
//	byte 2...  fields of the type, in order:
//
//	1 SetLimit        Key:str  Rate:f64  Burst:varint   (a limit enforced)
//	2 DeleteLimit     Key:str
//	3 ExtendHorizons  count:uvarint (1..65536), then count times: Key:str Ahead:varint
//	4 UpsertMember    ID:str  Addr:str  Fraction:f64
//	5 RemoveMember    ID:str
//	6 SetPause        Key:str  For:varint
//	7 SetCap          Key:str  Max:varint
//	8 DeleteCap       Key:str
//	9 AcquireSlots    ID:str  Holder:str  count:uvarint (1..16), then count times: Key:str;  then TTL:varint
//	10 ReleaseSlots   count:uvarint (1..4096), then count times: ID:str
//	11 SetLimit       as type 1, for a limit in dry run (Limit.DryRun)
//	12 SetLimit       as type 1, for a limit with a quota: then DryRun:byte(0|1) Quota:varint (>= 1) Per:byte (1..4)
//	13 CommitQuotas   count:uvarint (1..65536), then count times: Key:str Per:byte Window:varint Count:varint
//
//	str     uvarint byte length, then the bytes (UTF-8)
//	f64     8 bytes, big-endian IEEE 754 bits
//	varint  zigzag varint (encoding/binary.AppendVarint); durations in nanoseconds
//	uvarint encoding/binary.AppendUvarint
//
// Varints must be minimal. Nothing may follow the last field. A version
// other than 1 is ErrInvalidCommand; an unknown type is ErrUnknownCommand
// (later versions may add types; numbers are never reused).
//
// # Snapshot format, versions 2, 3 and 4
//
//	"RPSN"                       4 bytes magic
//	version                      1 byte, 2
//	applied index                uvarint
//	limit count                  uvarint, then per limit sorted by key:    Key:str Rate:f64 Burst:varint
//	horizon count                uvarint, then per horizon sorted by key:  Key:str Ahead:varint
//	member count                 uvarint, then per member sorted by ID:    ID:str Addr:str Fraction:f64
//	pause count                  uvarint, then per pause sorted by key:    Key:str For:varint (For > 0)
//	cap count                    uvarint, then per cap sorted by key:      Key:str Max:varint
//	slot count                   uvarint, then per slot sorted by ID:      ID:str Holder:str count:uvarint Key:str... TTL:varint
//	CRC-32C                      4 bytes big-endian, Castagnoli, of every byte before it
//
// Version 1 is the same without the pause, cap and slot sections (and
// with version byte 1). Version 3 is version 2 with one more byte after
// each limit's Burst: 1 if the limit is in dry run, else 0. Snapshot
// writes version 3 when some limit is in dry run and version 2 otherwise;
// Restore reads all three, a version-1 snapshot restoring with no pauses,
// caps or slots. Version 4 is version 2 with, after each limit's Burst,
// the quota fields of command type 12 (DryRun, Quota, Per; Quota 0 and Per
// 0 for a limit without one), and one more section after the slots:
// quota count, uvarint, then per key sorted: Key:str Per:byte
// Window:varint Count:varint. Snapshot writes version 4 when some limit
// has a quota or some count is stored.
//
// Keys and ids are sorted by byte value and unique; a slot's keys keep the
// order of its AcquireSlots and are unique. Restore verifies the
// checksum, every field (with the same validation as commands) and the
// order, reads at most MaxSnapshotSize bytes, and rejects anything else
// with ErrInvalidSnapshot, leaving the state as it was.
package fsm
