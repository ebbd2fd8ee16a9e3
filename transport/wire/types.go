package wire

import "strconv"

// Format constants of version 4.
const (
	Magic     = 0x5653 // "VS"
	Version   = 4
	HeaderLen = 40  // common header
	DataLen   = 40  // DATA part, before the payload
	AckLen    = 64  // ACK part
	SACKBits  = 256 // PSNs Cum+1 .. Cum+SACKBits in an ACK's bitmap
	MaxMsgLen = 1 << 31
	// maxPayload is the most payload one DATA packet can carry (the
	// payload_len field is 16 bits).
	maxPayload = 1<<16 - 1
)

// Type is the packet type (common header byte 3).
type Type uint8

// Packet types.
const (
	TypeData Type = 1
	TypeAck  Type = 2
)

func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeAck:
		return "ACK"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Op is the operation a DATA packet belongs to (DATA part byte 0).
type Op uint8

// Operations.
const (
	OpWrite      Op = 1
	OpWriteImm   Op = 2
	OpSend       Op = 3
	OpSendImm    Op = 4
	OpReadReq    Op = 5
	OpReadResp   Op = 6
	OpCmpSwap    Op = 7
	OpFetchAdd   Op = 8
	OpAtomicResp Op = 9
)

func (o Op) String() string {
	if o.known() {
		return opRules[o].name
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

func (o Op) known() bool { return o >= OpWrite && o <= OpAtomicResp }

// The kinds of operation, from opRules: the one definition the transport
// and the fabrics (through fabric.Op) share.

// IsAtomic reports an atomic request (CMP_SWAP, FETCH_ADD).
func (o Op) IsAtomic() bool { return o == OpCmpSwap || o == OpFetchAdd }

// ConsumesRecv reports whether o takes a receive WQE at the responder.
func (o Op) ConsumesRecv() bool { return o.known() && opRules[o].recv }

// AwaitsResponse reports a request that completes only when its response
// (READ_RESP, ATOMIC_RESP) has arrived.
func (o Op) AwaitsResponse() bool { return o.known() && opRules[o].respPSN }

// CarriesPayload reports a request whose payload goes from requester to
// responder (everything but READ_REQ and the responses).
func (o Op) CarriesPayload() bool { return o.known() && !opRules[o].resp && !opRules[o].noPayload }

// NAK is an ACK's negative acknowledgement code (ACK part byte 52).
type NAK uint8

// NAK codes.
const (
	NAKNone     NAK = 0 // no NAK
	NAKRNR      NAK = 1 // receiver not ready: no receive WQE; retry after RNRTimer
	NAKAccess   NAK = 2 // bad rkey, range or access: the message fails
	NAKInvalid  NAK = 3 // invalid request
	NAKRemoteOp NAK = 4 // the responder failed to execute a valid request
	// NAKBusy: the target is busy for a moment (its device in a control
	// change) and did not take the packet: resend soon, not a loss.
	NAKBusy NAK = 5
)

var nakNames = [...]string{NAKNone: "NONE", NAKRNR: "RNR", NAKAccess: "ACCESS", NAKInvalid: "INVALID", NAKRemoteOp: "REMOTE_OP", NAKBusy: "BUSY"}

func (n NAK) String() string {
	if int(n) < len(nakNames) {
		return nakNames[n]
	}
	return "NAK(" + strconv.Itoa(int(n)) + ")"
}

// Header flags (common header byte 4). Bits 6..7 must be zero.
const (
	FlagFirst     uint8 = 1 << 0 // first packet of a message (DATA only)
	FlagLast      uint8 = 1 << 1 // last packet of a message (DATA only)
	FlagRetx      uint8 = 1 << 2 // retransmission
	FlagAckReq    uint8 = 1 << 3 // ask for an immediate ACK
	FlagSolicited uint8 = 1 << 4 // SEND/SEND_IMM/WRITE_IMM solicited event (DATA only)
	// FlagDup (ACK only): the receiver got DATA packet Ack.DupPSN again,
	// a copy of one it had (a duplicate report, like TCP's DSACK).
	FlagDup uint8 = 1 << 5

	flagsAll      = FlagFirst | FlagLast | FlagRetx | FlagAckReq | FlagSolicited | FlagDup
	flagsDataOnly = FlagFirst | FlagLast | FlagSolicited
	flagsAckOnly  = FlagDup
)

// maxRNRTimer is the largest IB min_rnr_timer encoding (5 bits).
const maxRNRTimer = 31

// Header is the common header every packet starts with.
type Header struct {
	Type   Type
	Flags  uint8
	Path   uint16 // sender's path (entropy) index; ACKs echo the triggering packet's
	Tenant uint32
	Conn   uint32 // the receiver's connection id
	Token  uint64 // per-connection secret the receiver chose at setup
	PSN    uint32 // DATA: packet sequence number; ACK: 0
	TS     int64  // sender's transmit time, ns on the sender's clock
}

// Data is the DATA part; the payload follows it.
type Data struct {
	Op         Op
	PayloadLen uint16
	MSN        uint32 // message sequence number
	SSN        uint32 // SEND/SEND_IMM/WRITE_IMM: receive WQE index; else 0
	Offset     uint32 // payload's byte offset within the message
	MsgLen     uint32 // message length; READ_REQ: the length to read
	RKey       uint32 // WRITE*, READ_REQ, atomics; else 0
	RAddr      uint64 // WRITE*, READ_REQ, atomics: remote address; READ_RESP/ATOMIC_RESP: request's MSN
	Imm        uint32 // WRITE_IMM/SEND_IMM; else 0
	// RespPSN (READ_REQ, atomics; else 0): the first psn of the
	// requester's receiving stream, where the responder's stream starts
	// if the response is the first thing it sends (docs/wire.md,
	// section 6).
	RespPSN uint32
}

// Ack is the ACK part.
type Ack struct {
	Cum uint32 // next PSN expected: every PSN before it was received
	// SACK: bit i of word i/64 (bit i%64) reports PSN Cum+1+i received.
	// On the wire it is 32 bytes, bit i in byte i/8, LSB first, so each
	// word is stored little-endian.
	SACK     [4]uint64
	EchoTS   int64  // TS of the packet that triggered this ACK
	MSN      uint32 // receiver's next message to commit
	NAK      NAK
	RNRTimer uint8  // IB min_rnr_timer encoding, with NAKRNR; else 0
	NAKMSN   uint32 // the message the NAK is about; 0 with NAKNone
	Credit   uint32 // receiver-granted credit; 0 = none
	// DupPSN, with FlagDup in the header: a DATA packet the receiver got
	// again (the ACK covers it); 0 without the flag.
	DupPSN uint32
}

// Packet is a parsed packet. Data is set for TypeData, Ack for TypeAck;
// the other is zero. Payload aliases the buffer given to Parse.
type Packet struct {
	Header
	Data    Data
	Ack     Ack
	Payload []byte
}

// opRule is what an op may carry; Parse reads it instead of switching on
// the op for every field.
type opRule struct {
	name      string
	remote    bool   // rkey/raddr address responder memory (raddr+msg_len must not wrap)
	resp      bool   // a response: rkey 0, raddr holds the request's MSN (high 32 bits 0)
	recv      bool   // consumes a receive WQE: ssn meaningful, SOLICITED allowed
	imm       bool   // carries immediate data
	fixed     uint16 // exact payload and message length (atomics); 0 = any
	noPayload bool   // READ_REQ: single packet, no payload, msg_len = length to read
	aligned   bool   // raddr must be 8-byte aligned (atomics)
	respPSN   bool   // awaits a response: carries resp_psn
}

var opRules = [...]opRule{
	OpWrite:      {name: "WRITE", remote: true},
	OpWriteImm:   {name: "WRITE_IMM", remote: true, recv: true, imm: true},
	OpSend:       {name: "SEND", recv: true},
	OpSendImm:    {name: "SEND_IMM", recv: true, imm: true},
	OpReadReq:    {name: "READ_REQ", remote: true, noPayload: true, respPSN: true},
	OpReadResp:   {name: "READ_RESP", resp: true},
	OpCmpSwap:    {name: "CMP_SWAP", remote: true, fixed: 16, aligned: true, respPSN: true},
	OpFetchAdd:   {name: "FETCH_ADD", remote: true, fixed: 8, aligned: true, respPSN: true},
	OpAtomicResp: {name: "ATOMIC_RESP", resp: true, fixed: 8},
}
