// Package wire is the nodes' RPC protocol: one table of methods and
// result codes, the request and answer messages, and their binary codecs.
// Every message starts with a version byte; a decoder refuses an unknown
// version, bytes left over, and values out of their bounds (ErrBadRPC), so
// nodes of different versions fail loudly rather than misread each other,
// and no input makes a decoder panic (FuzzRPCDecode). It knows nothing of
// raft or of a node: node serves and calls the methods.
package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/raftpace/raftpace"
)

// Methods: every RPC a node serves, one table. The comment says who calls
// whom and what for.
const (
	MethodReserve      uint8 = 1  // follower -> leader: grant events of a key
	MethodSetLimit     uint8 = 2  // follower -> leader: commit a limit
	MethodRemoveServer uint8 = 3  // leaving node -> leader: remove it from raft
	MethodLease        uint8 = 4  // any node -> leader: a run of slots of a key
	MethodShare        uint8 = 5  // leader -> member: renew the share lease
	MethodPause        uint8 = 6  // any node -> leader: record a pause (atomic maximum)
	MethodAcquireSlots uint8 = 7  // any node -> leader: take slots, waiting for room
	MethodReleaseSlots uint8 = 8  // any node -> leader: give slots back
	MethodSetCap       uint8 = 9  // any node -> leader: set (Max > 0) or delete (0) a cap
	MethodSync         uint8 = 10 // any node -> leader: the index to apply to read as fresh as the leader
	MethodRemaining    uint8 = 11 // any node -> leader: what a key's limit has left
)

// Version is the first byte of every request and answer.
const Version uint8 = 1

// Result codes of RPC answers.
const (
	CodeOK uint8 = iota
	CodeNotLeader
	CodeLimitExceeded
	CodeUnknownKey
	CodeInvalid
	CodeUnavailable

	// CodeConcurrency: a cap stayed full for the request's wait.
	CodeConcurrency uint8 = 16
	// CodePaused: the key is paused on the leader (the asking node may not
	// have applied the pause yet); Wait carries the remaining pause.
	CodePaused uint8 = 17
	// CodeQuotaExhausted: the key's quota is spent for its window; Wait
	// carries the time until the window resets.
	CodeQuotaExhausted uint8 = 18
)

// ErrBadRPC: a message that does not decode (wrong version, truncated,
// bytes left over, a value out of bounds).
var ErrBadRPC = errors.New("node: malformed rpc message")

// ErrNotLeader tells the caller to forward: this node is not (or not yet)
// the leader that may grant.
var ErrNotLeader = errors.New("node: not the leader")

// ErrRetry marks failures that another attempt (at the same or a new
// leader) may cure: no leader yet, a leader change, a broken connection.
var ErrRetry = errors.New("node: retry")

// CodeFor maps an error to the code a remote node turns back into the same
// sentinel.
func CodeFor(err error) uint8 {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrNotLeader):
		return CodeNotLeader
	case errors.Is(err, raftpace.ErrQuotaExhausted):
		return CodeQuotaExhausted
	case errors.Is(err, raftpace.ErrLimitExceeded):
		return CodeLimitExceeded
	case errors.Is(err, raftpace.ErrUnknownKey):
		return CodeUnknownKey
	case errors.Is(err, raftpace.ErrInvalidRequest):
		return CodeInvalid
	default:
		return CodeUnavailable
	}
}

// ErrFor is CodeFor's inverse; msg is the remote's text.
func ErrFor(code uint8, msg string) error {
	switch code {
	case CodeOK:
		return nil
	case CodeNotLeader:
		return ErrNotLeader
	case CodeLimitExceeded:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrLimitExceeded, msg)
	case CodeQuotaExhausted:
		return fmt.Errorf("%w: %w (leader: %s)", raftpace.ErrQuotaExhausted, raftpace.ErrLimitExceeded, msg)
	case CodeUnknownKey:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrUnknownKey, msg)
	case CodeInvalid:
		return fmt.Errorf("%w (leader: %s)", raftpace.ErrInvalidRequest, msg)
	default:
		return fmt.Errorf("node: leader: %s", msg)
	}
}

// MaxBusy bounds a member's reported fallback reach: its local slots lie
// at most FallbackFor (at most 24h) ahead.
const MaxBusy = 25 * time.Hour

// ErrMsg is the text of err for an answer's Msg field ("" for nil),
// truncated to MaxMsgLen.
func ErrMsg(err error) string {
	if err == nil {
		return ""
	}
	return truncate(err.Error(), MaxMsgLen)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
