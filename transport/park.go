package transport

import "context"

// maxParkedPerConn bounds the parked requests of one connection (Park):
// a peer may keep this many waiting on its connection beside the
// maxInflightPerConn that run. A parked request is a goroutine that
// waits, a few KiB; 16,384 on one connection covers a member waiting on
// a lease for each of ten thousand keys (node/lease.MaxInFlight).
const maxParkedPerConn = 16384

// Park tells the transport that the request whose handler runs with ctx
// is about to wait (for a grant, a commit, a turn) rather than work: its
// place among the connection's maxInflightPerConn running requests goes
// to the next request, and it counts against a separate, larger bound of
// parked requests instead. Without it, 256 requests waiting on one
// connection stop the server reading it, and every other call on that
// connection (a renewal answer, a limit change) waits behind them.
//
// Park returns false, and the request keeps its place, when the parked
// bound is full or ctx is not a request's; the handler then simply waits
// holding it, as before. Call it from the handler's own goroutine; a
// second call does nothing.
func Park(ctx context.Context) bool {
	p, ok := ctx.Value(parkKey{}).(*parker)
	if !ok {
		return false
	}
	return p.park()
}

type parkKey struct{}

// parker is one served request's place: in the running bound (sem) until
// it parks, then in the parked one. Only the handler's goroutine and,
// after it, the goroutine that served it touch it.
type parker struct {
	sem, parked chan struct{}
	isParked    bool
}

func (p *parker) park() bool {
	if p.isParked {
		return true
	}
	select {
	case p.parked <- struct{}{}:
	default:
		return false
	}
	<-p.sem
	p.isParked = true
	return true
}

// release gives back whichever place the request holds.
func (p *parker) release() {
	if p.isParked {
		<-p.parked
		return
	}
	<-p.sem
}
