package transport

import "sync/atomic"

// Stats is a snapshot of a Transport's counters. Counts are since New;
// Conns* are current values.
type Stats struct {
	// Accepted counts inbound connections admitted under MaxConns.
	Accepted uint64
	// Rejected is the sum of the Rejected* counts: inbound connections the
	// transport closed because they broke a rule.
	Rejected uint64
	// RejectedStream: bad first byte, or a raft stream nobody Accepted
	// within HandshakeTimeout.
	RejectedStream uint64
	// RejectedConns: accepted while MaxConns connections were open.
	RejectedConns uint64
	// RejectedFrame: an inbound RPC frame with an oversize or undersize
	// length, or cut short by the end of the stream.
	RejectedFrame uint64
	// RejectedHandshake: no stream byte within HandshakeTimeout.
	RejectedHandshake uint64
	// RejectedPeer: accepted while MaxConnsPerPeer connections from the
	// same IP were open.
	RejectedPeer uint64
	// RejectedTLS: a plaintext dialer on a TLS transport, a TLS dialer on a
	// transport without TLS, or a TLS handshake that failed (a certificate
	// not signed by the cluster CA, none at all, an old TLS version).
	// Handshakes that time out count in RejectedHandshake.
	RejectedTLS uint64

	// ConnsIn and ConnsOut are the connections open now, raft and RPC.
	ConnsIn, ConnsOut int64
	// Dials and DialErrors count outbound connection attempts (raft and RPC).
	Dials, DialErrors uint64

	// CallsIn counts requests received; HandlerErrors those whose handler
	// returned an error (or panicked).
	CallsIn, HandlerErrors uint64
	// CallsOut counts Calls made; CallErrors those that returned an error
	// of any kind (remote, context, connection).
	CallsOut, CallErrors uint64
}

type counters struct {
	accepted, rejectedStream, rejectedConns, rejectedFrame, rejectedHandshake atomic.Uint64
	rejectedPeer, rejectedTLS                                                 atomic.Uint64
	connsIn, connsOut                                                         atomic.Int64
	dials, dialErrors                                                         atomic.Uint64
	callsIn, handlerErrors                                                    atomic.Uint64
	callsOut, callErrors                                                      atomic.Uint64
}

// Stats returns a snapshot of the transport's counters.
func (t *Transport) Stats() Stats {
	c := &t.stats
	s := Stats{
		Accepted:          c.accepted.Load(),
		RejectedStream:    c.rejectedStream.Load(),
		RejectedConns:     c.rejectedConns.Load(),
		RejectedFrame:     c.rejectedFrame.Load(),
		RejectedHandshake: c.rejectedHandshake.Load(),
		RejectedPeer:      c.rejectedPeer.Load(),
		RejectedTLS:       c.rejectedTLS.Load(),
		ConnsIn:           c.connsIn.Load(),
		ConnsOut:          c.connsOut.Load(),
		Dials:             c.dials.Load(),
		DialErrors:        c.dialErrors.Load(),
		CallsIn:           c.callsIn.Load(),
		HandlerErrors:     c.handlerErrors.Load(),
		CallsOut:          c.callsOut.Load(),
		CallErrors:        c.callErrors.Load(),
	}
	s.Rejected = s.RejectedStream + s.RejectedConns + s.RejectedFrame + s.RejectedHandshake + s.RejectedPeer + s.RejectedTLS
	return s
}
