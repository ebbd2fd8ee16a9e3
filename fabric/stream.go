package fabric

import "fmt"

// The streaming side of the seam: a request from another host arrives in
// packets, in any order, and lands straight in guest memory, so the
// responder cannot take it in one call as Respond does.

// StreamResponder is a Responder that also takes requests whose payload
// arrives in pieces. Begin and the methods of the Incomings it returns
// are called inside the responder's data path: between TryEnter (or
// Enter) and Exit, which hold the device's data-path gate shared, so that
// no control change of the device runs meanwhile. They never wait for
// anything themselves; TryEnter does not either, so the one goroutine
// that serves every device of a host (the cross-host fabric's I/O loop)
// is never stalled by one device's control change: it drops what that
// device cannot take now, and the peer resends it.
type StreamResponder interface {
	Responder
	// TryEnter enters the device's data path if no control change holds
	// it, without waiting: true must be followed by Exit.
	TryEnter() bool
	// Enter enters it, waiting for a control change to end: only for a
	// goroutine the device never waits for while it holds its gate, and
	// never on a path that serves other devices too.
	Enter()
	// Exit leaves the data path.
	Exit()
	// Begin checks req exactly as Respond would before any byte moves
	// (QP, state, peer, rkey, access, range; for SEND, SEND_IMM and
	// WRITE_IMM the receive WQE it will consume: the one req.RecvAhead
	// past the next unconsumed one) and prepares the target, pinning it.
	// req.Local is nil: the payload is to come. It returns an Incoming
	// and OutcomeOK, or the refusal (OutcomeRNR with req.RNRTimer set
	// when that receive WQE is not posted yet) and nil. Nothing of a
	// refused request takes effect.
	Begin(req *Request) (Incoming, Outcome)
}

// Incoming is one accepted request, between Begin and its end. Its
// methods are called inside its responder's data path (see
// StreamResponder), from one goroutine at a time.
type Incoming interface {
	// Place copies b to offset off of the message, at most once per
	// byte, in any order. false: the target went away since Begin (the
	// guest's memory changed, the QP was reset); nothing more of it may
	// be placed, and it ends with Release, uncommitted.
	Place(off uint64, b []byte) bool
	// Commit executes the request, once, when all of it is placed and
	// every earlier request of its connection is committed: a receive
	// WQE is consumed and its CQE written, an atomic performed (Value
	// returns the word before it). A refusal here (the target went away)
	// means nothing took effect.
	Commit() Outcome
	// Value is an atomic's result, after Commit.
	Value() uint64
	// ReadAt reads a committed READ's source for its response: the
	// responder's memory at offset off of the read. false: that memory
	// went away, and the response must not be sent.
	ReadAt(p []byte, off uint64) bool
	// Release ends the request, committed or not. A committed READ's
	// ReadAt stays valid after it, until Finish: its response may be
	// resent long after the commit.
	Release()
	// Finish says that a committed READ's response is needed no more:
	// the requester has all of it, or the connection ended. Called once
	// per committed READ, after Release; a responder pausing its device
	// waits for it (a resend must find the memory the first send read).
	Finish()
}

// Connector is implemented by fabrics that keep state per connected QP,
// such as the cross-host fabric's transport connection per QP pair. The
// engine calls Connect when a QP enters RTR (from then on it knows its
// peer and must take that peer's requests) and again when it enters RTS
// (with the send side's attributes), and Disconnect when the QP goes back
// to RESET or is destroyed. It calls neither with its gate held.
type Connector interface {
	// Connect makes or updates the connection of c.Local with c.Remote.
	// It fails (and changes nothing) if the peer is unreachable by
	// configuration or the connection cannot be made.
	Connect(c Connection) error
	// Disconnect ends local's connection: every request it had posted
	// completes (OutcomeFlushed) before Disconnect returns, and no
	// Incoming of it is called afterwards.
	Disconnect(local Addr)
}

// Connection describes a connected RC QP pair, from the local side.
//
// It has no path MTU: the fabric cuts messages as its own network
// needs (fabric/remote by the host network's MTU), since an RC message
// is delivered whole and the guest cannot see how it was cut.
type Connection struct {
	Local, Remote Addr
	// Tenant is the local device's tenant; both ends must agree.
	Tenant uint32
	// Send is false at RTR (receive only), true from RTS.
	Send bool
	// RQPSN is the QP's rq_psn (from RTR): the first PSN of the peer's
	// requests, which is the peer's sq_psn.
	RQPSN uint32
	// SQPSN is the QP's sq_psn (from RTS, meaningful when Send is true):
	// the first PSN of its own requests, the peer's rq_psn. A fabric
	// that keeps a packet stream per direction starts each at these, as
	// IB does, so that a QP pair reset and connected again with other
	// PSNs does not take the old connection's packets for its own.
	SQPSN uint32
	// RetryCnt and RNRRetry are the QP's retry_cnt and rnr_retry (IB:
	// 0..7, rnr_retry 7 is for ever), meaningful when Send is true.
	RetryCnt, RNRRetry uint8
}

func (c Connection) String() string {
	return fmt.Sprintf("%v<->%v tenant %d", c.Local, c.Remote, c.Tenant)
}
