package transport

import "errors"

// Sentinel errors. Every error this package returns wraps one or more of
// these, a context error, or a network error; test for them with errors.Is
// and errors.As.
var (
	// ErrClosed: the Transport (or its raft StreamLayer) has been closed.
	// Calls in flight when Close runs fail with it too.
	ErrClosed = errors.New("transport: closed")

	// ErrFrameTooLarge: a frame's length exceeds MaxFrameSize. Call returns
	// it before sending a request that would not fit; a connection that
	// receives such a frame is closed and its pending calls fail with
	// ErrConnLost wrapping this.
	ErrFrameTooLarge = errors.New("transport: frame too large")

	// ErrBadFrame: the peer broke the framing rules (a length shorter than
	// the 9-byte header, a frame cut short by end of stream, an unknown
	// response status).
	ErrBadFrame = errors.New("transport: malformed frame")

	// ErrConnLost: the connection carrying a Call broke (peer closed it,
	// reset, protocol violation) before the response arrived. The request
	// may or may not have been handled by the peer.
	ErrConnLost = errors.New("transport: connection lost")

	// ErrRemote: the remote Handler returned an error. Calls return it as a
	// *RemoteError, which unwraps to ErrRemote.
	ErrRemote = errors.New("transport: remote error")

	// ErrNotServing: a request arrived before the transport had a handler
	// (see Config.Handler). The caller gets it as a *RemoteError and may
	// retry: its owner is still starting.
	ErrNotServing = errors.New("transport: not serving requests yet")
)

// RemoteError is the error a Call returns when the remote Handler returned
// an error: Message is that error's text (the remote error value itself does
// not cross the wire). Use errors.As to get it, or errors.Is(err, ErrRemote).
type RemoteError struct {
	Message string
}

// Error returns "transport: remote: " followed by Message.
func (e *RemoteError) Error() string { return "transport: remote: " + e.Message }

// Unwrap returns ErrRemote.
func (e *RemoteError) Unwrap() error { return ErrRemote }
