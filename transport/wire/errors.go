package wire

import "errors"

// Parse's errors wrap these, so a receiver can count drops with errors.Is.
var (
	// ErrMalformed: the datagram is not a valid packet of this version.
	ErrMalformed = errors.New("wire: malformed packet")
	// ErrVersion: the datagram carries our magic but another version
	// (it also matches ErrMalformed).
	ErrVersion = errors.New("wire: unsupported version")
)

// parseError is one specific reason to drop a datagram. They are
// preallocated so that rejecting a packet allocates nothing, and the
// distinct values let tests check that each rule is the one that fired.
type parseError struct {
	msg     string
	version bool
}

func (e *parseError) Error() string { return e.msg }

// Is makes every parseError match ErrMalformed, and the version error
// ErrVersion too, without allocating an error chain.
func (e *parseError) Is(target error) bool {
	return target == ErrMalformed || (e.version && target == ErrVersion)
}

func perr(msg string) *parseError { return &parseError{msg: "wire: malformed packet: " + msg} }

var (
	errShort     = perr("shorter than the common header")
	errMagic     = perr("bad magic")
	errVersion   = &parseError{msg: "wire: unsupported version (want 4)", version: true}
	errType      = perr("unknown type")
	errFlags     = perr("unknown flag bits")
	errAckFlags  = perr("FIRST/LAST/SOLICITED flag on an ACK")
	errDataFlags = perr("DUP flag on a DATA packet")
	errHdrRsvd   = perr("reserved header field not zero")
	errAckPSN    = perr("ACK with non-zero psn")

	errDataShort    = perr("DATA shorter than its headers")
	errOp           = perr("unknown op")
	errDataRsvd     = perr("reserved DATA field not zero")
	errPayloadLen   = perr("payload_len does not match the datagram")
	errMsgLen       = perr("msg_len above 2^31")
	errRange        = perr("offset+payload_len beyond msg_len")
	errFirst        = perr("FIRST packet with non-zero offset")
	errLast         = perr("LAST packet does not end the message")
	errSolicited    = perr("SOLICITED flag on an op without solicited events")
	errSSN          = perr("ssn set on an op that consumes no receive WQE")
	errImm          = perr("imm set on an op without immediate data")
	errRespPSN      = perr("resp_psn set on an op that awaits no response")
	errRKey         = perr("rkey set on an op that addresses no remote memory")
	errRAddr        = perr("raddr set on an op that addresses no remote memory")
	errRespRAddr    = perr("response raddr above 32 bits (it holds the request's msn)")
	errRAddrWrap    = perr("remote range raddr..raddr+msg_len-1 wraps around 2^64")
	errReadPayload  = perr("READ_REQ with payload")
	errReadOffset   = perr("READ_REQ with non-zero offset")
	errAtomicLen    = perr("atomic payload of the wrong size")
	errAtomicMsgLen = perr("atomic msg_len not equal to its payload")
	errAtomicAlign  = perr("atomic raddr not 8-byte aligned")

	errAckLen       = perr("ACK datagram of the wrong length")
	errAckRsvd      = perr("reserved ACK field not zero")
	errNAK          = perr("unknown NAK code")
	errRNRTimer     = perr("rnr_timer above 31 or set without an RNR NAK")
	errNAKMSN       = perr("nak_msn set without a NAK")
	errDupPSN       = perr("dup_psn set without the DUP flag")
	errDupUncovered = perr("dup_psn of a packet the ACK does not cover")
)
