package node

import "errors"

// Errors of a Node's own (the errors a request can end in are package
// raftpace's).
var (
	// ErrInvalidConfig: Config failed validation.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrLastVoter: Leave refused to remove the cluster's only voter (the
	// last member of a cluster shutting down): stop it with Close instead;
	// its state stays in the data dir.
	ErrLastVoter = errors.New("the cluster's only voter cannot leave")
)
