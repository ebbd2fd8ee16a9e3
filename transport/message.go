package transport

import (
	"fmt"

	"github.com/vstellar/vstellar/transport/wire"
)

// Source is where an outgoing message's payload comes from (the
// requester's guest memory): ReadAt fills p with the message bytes at
// off. It is called for every (re)transmission, so a retransmission reads
// the memory again rather than keeping a copy. false means the memory is
// gone (removed or faulted): the connection fails (StatusLocal), since
// sending anything else would deliver wrong bytes.
type Source interface {
	ReadAt(p []byte, off uint64) bool
}

// Finisher is implemented by a Source that holds something for a
// response (a READ's responder keeps the memory it reads from): the
// connection calls Finish once per response it was given, when the peer
// has committed all of it or the connection ended.
type Finisher interface {
	Finish()
}

// Placer is where a READ's response lands (the requester's guest
// memory): WriteAt puts p at offset off of the read, in any order, at
// most once per byte. false means the memory is gone: the connection
// fails (StatusLocal).
type Placer interface {
	WriteAt(p []byte, off uint64) bool
}

// Message is a request posted on a connection.
type Message struct {
	// Op is WRITE, WRITE_IMM, SEND, SEND_IMM, READ_REQ, CMP_SWAP or
	// FETCH_ADD.
	Op        wire.Op
	Len       uint32 // bytes to send; READ_REQ: bytes to read; atomics: ignored (8)
	RAddr     uint64 // WRITE*, READ, atomics: remote address
	RKey      uint32 // WRITE*, READ, atomics: remote key
	Imm       uint32 // *_IMM
	Solicited bool
	Src       Source // WRITE*/SEND*: the payload (may be nil when Len is 0)
	Dst       Placer // READ_REQ: where the response goes
	// Compare and SwapAdd are the atomics' operands (FETCH_ADD: SwapAdd
	// is the addend).
	Compare, SwapAdd uint64
	// Token is the caller's cookie, returned in the Completion.
	Token uint64
}

func (m *Message) validate() error {
	switch m.Op {
	case wire.OpWrite, wire.OpWriteImm, wire.OpSend, wire.OpSendImm:
		if m.Len > 0 && m.Src == nil {
			return fmt.Errorf("%d bytes without a source: %w", m.Len, ErrMessage)
		}
	case wire.OpReadReq:
		if m.Len > 0 && m.Dst == nil {
			return fmt.Errorf("READ of %d bytes without a destination: %w", m.Len, ErrMessage)
		}
	case wire.OpCmpSwap, wire.OpFetchAdd:
		if m.RAddr%8 != 0 {
			return fmt.Errorf("atomic at %#x not 8-byte aligned: %w", m.RAddr, ErrMessage)
		}
	default:
		return fmt.Errorf("op %v: %w", m.Op, ErrMessage)
	}
	if uint64(m.Len) > wire.MaxMsgLen {
		return fmt.Errorf("%d bytes: %w", m.Len, ErrMessage)
	}
	return nil
}

// Status is how a message ended.
type Status uint8

const (
	StatusOK Status = iota
	// StatusRetryExceeded: RetryLimit timeouts without progress.
	StatusRetryExceeded
	// StatusRNRRetryExceeded: the receiver was not ready RNRRetry times.
	StatusRNRRetryExceeded
	// StatusRemoteAccess, StatusRemoteInvalid, StatusRemoteOp: the
	// receiver refused the message (its NAK).
	StatusRemoteAccess
	StatusRemoteInvalid
	StatusRemoteOp
	// StatusFlushed: the connection failed (or was closed) before the
	// message completed.
	StatusFlushed
	// StatusLocal: our own memory behind a message (a payload to send, a
	// READ's destination) could not be read or written any more.
	StatusLocal
)

var statusNames = [...]string{"OK", "RETRY_EXCEEDED", "RNR_RETRY_EXCEEDED", "REMOTE_ACCESS", "REMOTE_INVALID", "REMOTE_OP", "FLUSHED", "LOCAL"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Completion reports one message's end, in posting order.
type Completion struct {
	Token  uint64
	MSN    uint32
	Status Status
	// Value is an atomic's result: the remote word before the operation.
	Value uint64
}

// Inbound describes a message arriving from the peer.
type Inbound struct {
	MSN, SSN  uint32
	Op        wire.Op
	Len       uint32
	RAddr     uint64
	RKey, Imm uint32
	Solicited bool
	// Compare and SwapAdd are an atomic's operands (set before Begin).
	Compare, SwapAdd uint64
	// Ctx is the Sink's: set it in Begin (the translated target, the
	// receive WQE), it comes back in Place and Commit.
	Ctx any
	// Response is set by the Sink's Commit of a READ_REQ (the bytes to
	// return, m.Len of them) ...
	Response Source
	// ... and Result by its Commit of an atomic (the word before).
	Result uint64
}

// Sink receives inbound messages (the responder's side of the device).
type Sink interface {
	// Begin is called once per message, before any of its bytes are
	// placed, on whichever of its packets arrives first. NAKNone accepts
	// it; NAKRNR asks the sender to come back after rnrTimer, and
	// NAKBusy soon, its target being busy for a moment (for both,
	// nothing is kept and Begin is called again; NAKBusy is answered as
	// a packet the Gate turned away); another NAK refuses it for good.
	Begin(m *Inbound) (nak wire.NAK, rnrTimer uint8)
	// Place writes b at offset off of the message: at most once per byte,
	// in any order. false means the target went away since Begin (its
	// memory was removed): the message is refused (REMOTE_OP) and nothing
	// more of it is placed.
	Place(m *Inbound, off uint64, b []byte) bool
	// Commit is called once per accepted message, in message order, when
	// all of it has been placed. For a READ_REQ it sets m.Response; for an
	// atomic it performs the operation, exactly once, and sets m.Result.
	// A NAK other than NAKNone refuses the message after all (its target
	// went away since Begin; NAKRNR and NAKBusy are not retryable here
	// and become NAKRemoteOp): nothing of it may have taken effect.
	Commit(m *Inbound) wire.NAK
}

// Gate is implemented by a Sink whose target is at times unavailable for
// a while (a device in a control change) and that must not make its
// caller wait for it: the caller drives many connections, and a wait
// for one device would stall them all. The connection enters the gate
// around everything that reaches the Sink: each DATA packet it handles
// (Begin, Place, Commit) and each transmission while a READ response of
// its own may read from the Sink. When TryEnter fails, a DATA packet is
// dropped unreceived (counted in Stats.Busy) and answered with a BUSY
// NAK, upon which the peer resends it soon, neither taking it for a
// loss nor counting a retry unless the gate stays taken for a whole
// Config.BusyTimeout (busy.go); a response waits (Timeout asks to be
// called back soon), and the peer waiting for it is told so with BUSY
// NAKs too. So nothing is lost or done twice, completions keep their
// order, and a control change does not use up the peer's retries.
type Gate interface {
	// TryEnter takes the gate if it is free, without waiting; true
	// must be followed by Exit.
	TryEnter() bool
	Exit()
}
