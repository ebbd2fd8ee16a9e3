package abi

import (
	"fmt"
	"strings"
)

// Verbs enumerations. Where IB verbs (libibverbs) defines the same concept
// the values are the ibv_* values, so that a guest kernel driver and an
// rdma-core provider translate nothing.

// QPType is the transport type of a queue pair.
type QPType uint8

const (
	QPTypeRC QPType = 2 // reliable connected (IBV_QPT_RC)
	QPTypeUD QPType = 4 // unreliable datagram (IBV_QPT_UD); reserved, not implemented
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair's state (IBV_QPS_*).
type QPState uint32

const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2 // ready to receive
	QPStateRTS   QPState = 3 // ready to send
	QPStateSQD   QPState = 4 // send queue drained
	QPStateSQE   QPState = 5 // send queue error
	QPStateErr   QPState = 6

	numQPStates = 7
)

var qpStateNames = [numQPStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// Valid reports whether s is a defined state.
func (s QPState) Valid() bool { return s < numQPStates }

func (s QPState) String() string {
	if s.Valid() {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPAttrMask selects the QPAttr fields a MODIFY_QP applies (IBV_QP_*).
type QPAttrMask uint32

const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotif QPAttrMask = 1 << 2
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic   QPAttrMask = 1 << 13
	QPAttrAltPath         QPAttrMask = 1 << 14
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrPathMigState    QPAttrMask = 1 << 18
	QPAttrCap             QPAttrMask = 1 << 19
	QPAttrDestQPN         QPAttrMask = 1 << 20

	// QPAttrAll is every bit this ABI defines; others are reserved.
	QPAttrAll QPAttrMask = 1<<21 - 1
)

// Access flags of an MR or a QP (IBV_ACCESS_*). Local read is always
// allowed.
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3

	// AccessAll is every access bit this ABI defines.
	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// String names the flags, "|"-separated ("local_read" alone for none:
// local read is always allowed).
func (a Access) String() string {
	names := []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "local_write"}, {AccessRemoteWrite, "remote_write"},
		{AccessRemoteRead, "remote_read"}, {AccessRemoteAtomic, "remote_atomic"}}
	var parts []string
	for _, n := range names {
		if a&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	if rest := a &^ AccessAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	if len(parts) == 0 {
		return "local_read"
	}
	return strings.Join(parts, "|")
}

// Validate checks for undefined bits and for remote write or atomic
// access without local write, which IB forbids (the remote side could
// change memory the local side may not).
func (a Access) Validate() error {
	if a&^AccessAll != 0 {
		return fmt.Errorf("access flags %#x: undefined bits %#x: %w", uint32(a), uint32(a&^AccessAll), ErrBadValue)
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("access flags %#x: remote write or atomic needs local write: %w", uint32(a), ErrBadValue)
	}
	return nil
}

// MTU is a path MTU (IBV_MTU_*).
type MTU uint32

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is a defined MTU.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes is the MTU in bytes (0 for an undefined value).
func (m MTU) Bytes() uint32 {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// PortState is a port's logical state (IBV_PORT_*).
type PortState uint32

const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// LinkLayerEthernet is the only link layer: vStellar carries RDMA over
// UDP/IP between hosts, like RoCEv2.
const LinkLayerEthernet uint8 = 2

// WROpcode is a send work request's operation (IBV_WR_*).
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpSwap    WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6

	numWROpcodes = 7
)

var wrNames = [numWROpcodes]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"}

// Valid reports whether op is a defined send opcode.
func (op WROpcode) Valid() bool { return op < numWROpcodes }

// IsAtomic reports whether op is one of the 8-byte atomics.
func (op WROpcode) IsAtomic() bool { return op == WRAtomicCmpSwap || op == WRAtomicFetchAdd }

// HasImm reports whether op carries immediate data.
func (op WROpcode) HasImm() bool { return op == WRRDMAWriteWithImm || op == WRSendWithImm }

func (op WROpcode) String() string {
	if op.Valid() {
		return wrNames[op]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(op))
}

// WCOpcode is the operation a completion reports (IBV_WC_*).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (op WCOpcode) String() string {
	switch op {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(op))
}

// WCOpcodeFor is the completion opcode of a send work request. An
// undefined opcode (a WQE completed with an error) reports WCSend.
func WCOpcodeFor(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpSwap:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	}
	return WCSend
}

// WCStatus is a completion's status (IBV_WC_*).
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1  // local length error: SGEs shorter than the message
	WCLocQPOpErr     WCStatus = 2  // local QP operation error: malformed WQE
	WCLocProtErr     WCStatus = 4  // local protection error: bad lkey, PD or range
	WCWRFlushErr     WCStatus = 5  // flushed: the QP is in error
	WCBadRespErr     WCStatus = 7  // unexpected response from the responder
	WCLocAccessErr   WCStatus = 8  // local access error on the responder side
	WCRemInvReqErr   WCStatus = 9  // remote invalid request (length, opcode)
	WCRemAccessErr   WCStatus = 10 // remote access error: bad rkey, range or access
	WCRemOpErr       WCStatus = 11 // remote operation error
	WCRetryExcErr    WCStatus = 12 // transport retries exhausted
	WCRNRRetryExcErr WCStatus = 13 // receiver-not-ready retries exhausted
	WCFatalErr       WCStatus = 19 // device fatal error
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = map[WCStatus]string{
	WCSuccess: "SUCCESS", WCLocLenErr: "LOC_LEN_ERR", WCLocQPOpErr: "LOC_QP_OP_ERR",
	WCLocProtErr: "LOC_PROT_ERR", WCWRFlushErr: "WR_FLUSH_ERR", WCBadRespErr: "BAD_RESP_ERR",
	WCLocAccessErr: "LOC_ACCESS_ERR", WCRemInvReqErr: "REM_INV_REQ_ERR", WCRemAccessErr: "REM_ACCESS_ERR",
	WCRemOpErr: "REM_OP_ERR", WCRetryExcErr: "RETRY_EXC_ERR", WCRNRRetryExcErr: "RNR_RETRY_EXC_ERR",
	WCFatalErr: "FATAL_ERR", WCGeneralErr: "GENERAL_ERR",
}

func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Error makes a WCStatus usable as an error.
func (s WCStatus) Error() string { return "work completion " + s.String() }

// Send flags of a send WQE (IBV_SEND_*).
const (
	SendFence     uint8 = 1 << 0 // wait for earlier READs/atomics before this WQE
	SendSignaled  uint8 = 1 << 1 // write a CQE on success (errors always complete)
	SendSolicited uint8 = 1 << 2 // solicited event at the responder
	SendInline    uint8 = 1 << 3 // payload is in the WQE, not in SGEs

	sendFlagsAll = SendFence | SendSignaled | SendSolicited | SendInline
)

// CQE flags.
const (
	WCWithImm uint16 = 1 << 1 // imm_data is valid (IBV_WC_WITH_IMM)
)

// CQ arm flags (the low bits of the CQ doorbell record's arm word).
const (
	CQArmNextComp  uint32 = 1 << 0 // event on the next completion
	CQArmSolicited uint32 = 1 << 1 // event on the next solicited or error completion
	cqArmFlags            = CQArmNextComp | CQArmSolicited
)

// RNRTimerMicros is the IB min_rnr_timer encoding: the delay, in
// microseconds, a requester waits before retrying after an RNR NAK.
var RNRTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}
