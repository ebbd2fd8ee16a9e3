package abi

import (
	"encoding/binary"
	"fmt"
)

// Asynchronous events. The driver keeps device-writable buffers of at
// least EventSize bytes posted on QueueEvent; the device writes one Event
// per buffer and signals the queue's interrupt. Events that find no
// buffer wait in a bounded device-side queue; when that overflows the
// oldest are dropped and the next delivered event carries the number lost
// in Dropped.
//
//	0x00 le32 type (EventType)
//	0x04 le32 handle (QPN, CQN, SRQN or port number)
//	0x08 le32 info (type-specific: the WCStatus that caused a QP error)
//	0x0c le32 dropped (events lost before this one)
const EventSize = 16

// EventType says what an event reports. Values are ABI.
type EventType uint32

const (
	// EventCQComp: an armed CQ got a completion (FeatureCQNotify). The
	// CQ is disarmed; the driver re-arms it.
	EventCQComp EventType = 1
	// EventCQErr: a CQ overflowed. The CQ is in error: further
	// completions to it are dropped and its QPs move to ERR.
	EventCQErr EventType = 2
	// EventQPFatal: a QP moved to ERR because of an error the device
	// detected (a bad WQE, a ring it cannot read).
	EventQPFatal EventType = 3
	// EventQPReqErr: a QP moved to ERR because the peer rejected a
	// request (remote invalid request).
	EventQPReqErr EventType = 4
	// EventQPAccessErr: a QP moved to ERR on a remote access error.
	EventQPAccessErr EventType = 5
	// EventSQDrained: a QP in SQD has no more outstanding send WQEs.
	EventSQDrained EventType = 6
	// EventPortActive and EventPortErr: a port came up or went down.
	EventPortActive EventType = 7
	EventPortErr    EventType = 8
	// EventGIDChange: the GID table of a port changed.
	EventGIDChange EventType = 9
	// EventDeviceFatal: the device failed; the driver must reset it.
	EventDeviceFatal EventType = 10
	// EventSRQLimit: an SRQ with an armed limit fell below it (handle:
	// SRQN). The limit is disarmed; MODIFY_SRQ re-arms it (ABI 1.1).
	EventSRQLimit EventType = 11
	// EventSRQErr: an SRQ's ring broke (a runaway producer index); the
	// SRQ serves no more receives (handle: SRQN).
	EventSRQErr EventType = 12
	// EventQPLastWQE: a QP on an SRQ moved to ERR and has no receive WQE
	// of the SRQ left in progress (IBV_EVENT_QP_LAST_WQE_REACHED).
	EventQPLastWQE EventType = 13
)

var eventNames = map[EventType]string{
	EventCQComp: "CQ_COMP", EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL",
	EventQPReqErr: "QP_REQ_ERR", EventQPAccessErr: "QP_ACCESS_ERR", EventSQDrained: "SQ_DRAINED",
	EventPortActive: "PORT_ACTIVE", EventPortErr: "PORT_ERR", EventGIDChange: "GID_CHANGE",
	EventDeviceFatal: "DEVICE_FATAL", EventSRQLimit: "SRQ_LIMIT", EventSRQErr: "SRQ_ERR",
	EventQPLastWQE: "QP_LAST_WQE",
}

func (t EventType) String() string {
	if n, ok := eventNames[t]; ok {
		return n
	}
	return fmt.Sprintf("EventType(%d)", uint32(t))
}

// Event is one asynchronous event.
type Event struct {
	Type    EventType
	Handle  uint32
	Info    uint32
	Dropped uint32
}

// Put encodes e into b (len(b) >= EventSize).
func (e Event) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(e.Type))
	le.PutUint32(b[4:], e.Handle)
	le.PutUint32(b[8:], e.Info)
	le.PutUint32(b[12:], e.Dropped)
}

// DecodeEvent decodes an event from the bytes the device wrote.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) < EventSize {
		return Event{}, fmt.Errorf("event of %d bytes: %w", len(b), ErrShortBuffer)
	}
	le := binary.LittleEndian
	return Event{
		Type:    EventType(le.Uint32(b[0:])),
		Handle:  le.Uint32(b[4:]),
		Info:    le.Uint32(b[8:]),
		Dropped: le.Uint32(b[12:]),
	}, nil
}
