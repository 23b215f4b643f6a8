// Package admin is the local HTTP admin API of a raftpace agent and the
// client the operator's commands use to call it.
//
// It is one of the agent's surfaces (agent/admin, agent/metrics, agent/web):
// it sits on top of node but imports only raftpace, fsm and node/report
// (the shapes of a node's status), not node itself; node, the worker side
// and the leaf libraries under internal/ never import it.
//
// An agent serves NewHandler(n) on its --http address (default
// 127.0.0.1:7402). The API speaks JSON and is meant for the local operator.
// With WithToken (the agent's --http-token-file or RAFTPACE_HTTP_TOKEN)
// every /v1/ route requires "Authorization: Bearer TOKEN" and answers 401
// {"error":...,"code":"unauthorized"} without it; other paths (health and metrics endpoints) stay
// open. The agent refuses to serve it on a non-loopback address without a
// token. The API is plain HTTP: on a shared network, reach it through a
// tunnel or a TLS-terminating proxy.
//
// # Routes
//
//	GET  /v1/status        the node's view of the cluster (node/report's Status)
//	GET  /v1/limits        {"limits":{"KEY":{"rate":R,"burst":B},...}}
//	GET  /v1/limits/KEY    {"key":"KEY","rate":R,"burst":B}
//	PUT  /v1/limits/KEY    body {"rate":R,"burst":B,"dry_run":D}; burst
//	                       defaults to 1, dry_run to false (enforced); a
//	                       limit in dry run admits every event and counts
//	                       those it had no slot for (fsm.Limit.DryRun).
//	                       Answers like GET once the limit is committed.
//	                       A limit in dry run is written with "dry_run":true.
//	GET  /v1/caps          {"caps":{"KEY":N,...}}
//	PUT  /v1/caps/KEY      body {"max":N}: KEY's fleet-wide concurrency cap
//	DELETE /v1/caps/KEY    removes the cap
//	POST /v1/join          body {"addrs":["host:port",...]} (gossip
//	                       addresses); answers {"contacted":N}
//	POST /v1/leave         the node leaves the cluster (raft and gossip)
//	                       and closes, then the answer {"status":"left"};
//	                       on an error the node has not left and still runs
//
// The data plane's routes (reserve, wait, forfeit, pauses, slots:
// docs/dataplane.md) are package agent/dataplane's; the agent serves them
// beside these on --http, under the same token. Client.Pause calls its
// POST /v1/pauses/KEY.
//
// KEY is one path segment, percent-escaped (url.PathEscape): a key may hold
// '/', '?', '%' or non-ASCII characters. The server does not clean the path,
// so keys such as "." and ".." are addressed like any other. Keys follow
// fsm.ValidateKey.
//
// # Errors
//
// Every error answer is a JSON object {"error":"message"} with status
//
//	400  invalid input: a key or limit that fails validation (the message is
//	     fsm's, naming the field and the rule), malformed JSON, unknown
//	     fields, trailing data, a body over 64 KiB (MaxBodyBytes)
//	401  a token is required and the request had none or another one
//	404  no limit is set for the key (raftpace.ErrUnknownKey), or no such route
//	405  the route exists but not for this method (see the Allow header)
//	503  no leader could be reached (raftpace.ErrNoLeader), the node is closed,
//	     or the request's time (RequestTimeout, 10 s) ran out
//	500  anything else
//
// # Client
//
// Client calls the API; its errors carry the server's message and, through
// *Error, unwrap to raftpace.ErrInvalidRequest (400), raftpace.ErrUnknownKey (404)
// or raftpace.ErrNoLeader (503). When the agent cannot be reached at all the
// error wraps ErrUnreachable and says so:
//
//	c := &admin.Client{Addr: "127.0.0.1:7402"}
//	if err := c.SetLimit(ctx, "acme", fsm.Limit{Rate: 20, Burst: 5}); err != nil {
//		return err // e.g. `fsm: invalid limit: Rate 0: must be > 0`
//	}
package admin
