package fabric

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/transport/wire"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Addr names a QP anywhere: the GID of its device and its QP number.
type Addr struct {
	GID abi.GID
	QPN uint32
}

func (a Addr) String() string { return fmt.Sprintf("%x/%d", a.GID[:], a.QPN) }

// Op is the operation a request asks of the responder.
type Op uint8

const (
	OpWrite Op = iota + 1
	OpWriteImm
	OpSend
	OpSendImm
	OpRead
	OpCmpSwap
	OpFetchAdd
)

var opNames = [...]string{OpWrite: "WRITE", OpWriteImm: "WRITE_IMM", OpSend: "SEND", OpSendImm: "SEND_IMM",
	OpRead: "READ", OpCmpSwap: "CMP_SWAP", OpFetchAdd: "FETCH_ADD"}

// wireOps maps an Op to the transport's (0: none): the one conversion
// between the two, both ways (Wire, OpFromWire).
var wireOps = [...]wire.Op{
	OpWrite: wire.OpWrite, OpWriteImm: wire.OpWriteImm, OpSend: wire.OpSend, OpSendImm: wire.OpSendImm,
	OpRead: wire.OpReadReq, OpCmpSwap: wire.OpCmpSwap, OpFetchAdd: wire.OpFetchAdd,
}

// Wire is o on the cross-host wire, or 0 when o is not an operation.
func (o Op) Wire() wire.Op {
	if int(o) < len(wireOps) {
		return wireOps[o]
	}
	return 0
}

// OpFromWire is the request w stands for; false when w is not a request
// (a response, or unknown).
func OpFromWire(w wire.Op) (Op, bool) {
	if int(w) < len(fromWire) && fromWire[w] != 0 {
		return fromWire[w], true
	}
	return 0, false
}

// fromWire inverts wireOps (TestOpWireRoundTrip holds them together).
var fromWire = [...]Op{
	wire.OpWrite: OpWrite, wire.OpWriteImm: OpWriteImm, wire.OpSend: OpSend, wire.OpSendImm: OpSendImm,
	wire.OpReadReq: OpRead, wire.OpCmpSwap: OpCmpSwap, wire.OpFetchAdd: OpFetchAdd,
}

// IsAtomic, ConsumesRecv and HasResponse are the kinds wire.Op defines.

// IsAtomic reports CMP_SWAP and FETCH_ADD.
func (o Op) IsAtomic() bool { return o.Wire().IsAtomic() }

// ConsumesRecv reports an op that takes a receive WQE at the responder
// (SEND, SEND_IMM, WRITE_IMM).
func (o Op) ConsumesRecv() bool { return o.Wire().ConsumesRecv() }

// HasResponse reports an op whose responder sends data back (READ and
// the atomics).
func (o Op) HasResponse() bool { return o.Wire().AwaitsResponse() }

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Request is one RC message. The requester owns it until Complete.
type Request struct {
	Op       Op
	Src, Dst Addr
	// RemoteAddr and RKey address the responder's memory (WRITE, READ,
	// atomics).
	RemoteAddr uint64
	RKey       uint32
	// Imm is the immediate data of WRITE_IMM and SEND_IMM.
	Imm uint32
	// Solicited asks the responder for a solicited event (SEND).
	Solicited bool
	// Compare and SwapAdd are the operands of CMP_SWAP (compare, swap) and
	// FETCH_ADD (SwapAdd is the addend).
	Compare, SwapAdd uint64
	// Len is the message length: the bytes of Local for WRITE and SEND,
	// the bytes to read for READ, 8 for atomics.
	Len uint64
	// Local is the requester's memory: the source of WRITE and SEND, the
	// destination of READ data and of an atomic's original value. It stays
	// valid until Complete.
	Local []guestmem.View
	// Token is the requester's own tag for the request (the fabric does
	// not look at it).
	Token uint64

	// RNRTimer and HasRNRTimer are the responder's half of an RNR NAK,
	// which in IB carries the responder's min_rnr_timer: the requester
	// must wait at least that long before it retries. A responder that
	// answers OutcomeRNR sets RNRTimer to its QP's min_rnr_timer (the
	// 5-bit IB encoding, abi.RNRTimerMicros: 0 is 655.36 ms, not "unset")
	// and HasRNRTimer to true; the requester clears both before each
	// Post and reads them only after Complete. An RNR without
	// HasRNRTimer (a fabric that refused on the responder's behalf)
	// leaves the delay to the requester.
	RNRTimer    uint8
	HasRNRTimer bool

	// RecvAhead is for a request taken by StreamResponder.Begin: how many
	// receive-consuming requests (SEND, SEND_IMM, WRITE_IMM) of its
	// connection come before it and are not committed yet, so its receive
	// WQE is that many past the next unconsumed one.
	RecvAhead uint32
}

// Outcome is how a request ended.
type Outcome uint8

const (
	// OutcomeOK: executed (and, for READ and atomics, Local filled).
	OutcomeOK Outcome = iota
	// OutcomeRNR: receiver not ready: a SEND found no receive WQE. The
	// requester retries after the responder's RNR timer
	// (Request.RNRTimer), up to its rnr_retry.
	OutcomeRNR
	// OutcomeRetry: the responder could not serve the request now (its
	// device is stopping or changing memory); the requester retries, up
	// to retry_cnt.
	OutcomeRetry
	// OutcomeRemoteAccess: bad rkey, range, PD or access at the responder.
	OutcomeRemoteAccess
	// OutcomeInvalidRequest: the responder's QP cannot take this request
	// (wrong state, receive buffer too small, opcode not allowed).
	OutcomeInvalidRequest
	// OutcomeRemoteOp: the responder failed to execute a valid request.
	OutcomeRemoteOp
	// OutcomeUnreachable: no device owns the destination GID or QP.
	OutcomeUnreachable
	// OutcomeBusy: the responder's device is briefly busy (a control
	// command or memory change is taking something away from its data
	// path). The requester retries soon; busy answers cost nothing of
	// retry_cnt unless they go on for a whole ACK timeout.
	OutcomeBusy

	// The outcomes of a fabric that retries on the requester's behalf
	// (the cross-host transport, which knows the QP's retry_cnt and
	// rnr_retry from Connect): they are final.

	// OutcomeRetryExceeded: the peer did not answer within the retry
	// limit (IB RETRY_EXC_ERR).
	OutcomeRetryExceeded
	// OutcomeRNRExceeded: the peer was not ready rnr_retry times.
	OutcomeRNRExceeded
	// OutcomeFlushed: the QP's connection failed or was closed before
	// the request completed.
	OutcomeFlushed
	// OutcomeLocalError: the requester's own memory behind the request
	// could no longer be read or written.
	OutcomeLocalError
)

var outcomeNames = [...]string{"OK", "RNR", "RETRY", "REMOTE_ACCESS", "INVALID_REQUEST", "REMOTE_OP", "UNREACHABLE", "BUSY",
	"RETRY_EXCEEDED", "RNR_EXCEEDED", "FLUSHED", "LOCAL_ERROR"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Responder executes arriving requests against its device's QPs. It must
// be safe for concurrent use and must not block on another device.
type Responder interface {
	Respond(req *Request) Outcome
}

// Completer receives the outcome of a posted request.
type Completer interface {
	Complete(req *Request, o Outcome)
}

// Fabric carries requests to the devices that own their destinations.
type Fabric interface {
	// Register makes r the responder for gid. It fails if another
	// responder holds gid. The returned function unregisters it; after it
	// returns, r is not called again.
	Register(gid abi.GID, r Responder) (unregister func(), err error)
	// Post carries req to req.Dst and calls c.Complete exactly once.
	Post(req *Request, c Completer)
}

// Registration errors.
var (
	// ErrGIDInUse is returned by Register for a GID another device holds.
	ErrGIDInUse = errors.New("fabric: GID in use by another device")
	// ErrGIDReserved is returned by Register for a GID that belongs
	// elsewhere: another host's (a cross-host fabric routes it to a peer),
	// so a local device holding it would capture traffic meant for that
	// host.
	ErrGIDReserved = errors.New("fabric: GID belongs to another host")
)

// Local is the in-process fabric: every device of one daemon.
type Local struct {
	// peers maps a GID to its *entry. A sync.Map (a concurrent hash
	// trie): Post's lookups take no lock, and registering the thousandth
	// device costs what registering the first did (a copy-on-write map
	// made creating N devices O(N²)).
	peers sync.Map
}

// entry is one registration. Post holds it in an RWMutex read section so
// unregister can wait out calls in flight.
type entry struct {
	r    Responder
	mu   sync.RWMutex
	gone bool
}

var _ Fabric = (*Local)(nil)

// NewLocal returns an empty in-process fabric.
func NewLocal() *Local { return &Local{} }

// Register implements Fabric.
func (l *Local) Register(gid abi.GID, r Responder) (func(), error) {
	e := &entry{r: r}
	if _, loaded := l.peers.LoadOrStore(gid, e); loaded {
		return nil, fmt.Errorf("gid %x: %w", gid[:], ErrGIDInUse)
	}
	return func() { l.unregister(gid, e) }, nil
}

func (l *Local) unregister(gid abi.GID, e *entry) {
	l.peers.CompareAndDelete(gid, e)
	e.mu.Lock() // waits for calls in flight
	e.gone = true
	e.mu.Unlock()
}

// Post implements Fabric: it calls the destination's responder on the
// caller's goroutine and completes before returning.
func (l *Local) Post(req *Request, c Completer) {
	c.Complete(req, l.deliver(req))
}

func (l *Local) deliver(req *Request) Outcome {
	v, ok := l.peers.Load(req.Dst.GID)
	if !ok {
		return OutcomeUnreachable
	}
	e := v.(*entry)
	if !e.mu.TryRLock() {
		// Being unregistered: as good as gone, but let the requester
		// retry rather than fail on a race with a re-registration.
		return OutcomeRetry
	}
	defer e.mu.RUnlock()
	if e.gone {
		return OutcomeUnreachable
	}
	return e.r.Respond(req)
}
