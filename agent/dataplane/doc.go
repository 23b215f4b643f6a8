// Package dataplane is the agent's data plane: the HTTP/1.1 JSON routes
// through which a worker that embeds no node (Python, Ruby, a shell
// script) asks the agent beside it for its events, with the Go client's
// semantics (reserve, wait, forfeit, pause, slots). The routes, the times
// (JSON numbers of seconds), the rule a caller follows to place a grant on
// its own clock, and the error codes are specified in docs/dataplane.md;
// this package implements that page and nothing more.
//
// What it promises: a grant answer is never a 2xx on an error path, and
// follows the page's rule so that a caller who obeys it keeps the ceiling
// R*W + B + R*delta (delta the agent's --use-grace): "wait" is rounded up
// and "use_by" and "held" are rounded down to the microsecond, measured on
// the agent's clock from one moment taken just before the answer is
// written. A /v1/reserve that is refused (429 limit_exceeded) consumed
// nothing. A caller that hangs up during /v1/wait forfeits its slot. No
// input panics. At most MaxInFlight requests are served at once; beyond
// that the answer is 503 overloaded with Retry-After: 1.
//
// What it may depend on: raftpace (the errors it maps, Reservation,
// Slot), fsm (key validation, bounds) and agent/admin (its body reader
// and JSON writer, shared so both surfaces read and answer alike). Not
// node: the agent gives NewHandler a Node, which *node.Node satisfies.
// Only cmd/raftpace/internal/agent imports it; it serves NewHandler on
// the agent's --socket (no token: the file mode is the access control) and
// on --http under the admin API's token.
package dataplane
