package abi

import (
	"encoding/binary"
	"fmt"
)

// Control command payloads. Each is a fixed-size struct whose fields are
// encoded little-endian, in declaration order, with no implicit padding
// (encoding/binary's layout); explicit Reserved fields keep every field
// naturally aligned and must be zero. The size of each is ABI and pinned
// by tests; docs/spec.md gives the offsets.
//
// A handle is a 32-bit number the device chose: a PD, CQ, QP or AH number
// or an MR key. Handle 0 is never valid, so a zeroed request never names
// a live object.

// HandleReq names one object: DEALLOC_PD, DESTROY_CQ, DESTROY_QP,
// QUERY_QP, DEREG_MR (Handle = lkey), DESTROY_AH, QUERY_SRQ and
// DESTROY_SRQ.
type HandleReq struct {
	Handle   uint32
	Reserved uint32
}

// HandleResp returns a new object's handle: ALLOC_PD (pdn) and CREATE_AH
// (ahn).
type HandleResp struct {
	Handle   uint32
	Reserved uint32
}

// QueryPortReq is QUERY_PORT's request. Ports are numbered from 1.
type QueryPortReq struct {
	Port     uint32
	Reserved uint32
}

// PortAttr is QUERY_PORT's response.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTableLen  uint32
	PortCapFlags uint32
	MaxMsgSize   uint32
	PKeyTableLen uint16
	ActiveWidth  uint8 // IB encoding: 1 = 1x, 2 = 4x
	ActiveSpeed  uint8 // IB encoding
	PhysState    uint8 // 5 = LinkUp, 3 = Disabled
	LinkLayer    uint8 // LinkLayerEthernet
	Reserved0    uint16
	Reserved     [4]uint32
}

// GIDReq names a GID table entry: QUERY_GID and DEL_GID.
type GIDReq struct {
	Port  uint32
	Index uint32
}

// GID table entry types.
const (
	GIDTypeNone  uint32 = 0 // empty entry
	GIDTypeRoCE2 uint32 = 1 // an IPv6 or IPv4-mapped address, as in RoCEv2
)

// GID entry flags.
const (
	// GIDFlagDevice: the device owns the entry (index 0, derived from the
	// node GUID); the guest cannot change it.
	GIDFlagDevice uint32 = 1 << 0
	// GIDFlagGuest: the guest added the entry with ADD_GID.
	GIDFlagGuest uint32 = 1 << 1
)

// GID is a 128-bit global identifier (an IPv6 address).
type GID [16]byte

// GIDEntry is QUERY_GID's response.
type GIDEntry struct {
	GID      GID
	Type     uint32
	Flags    uint32
	Reserved [2]uint32
}

// AddGIDReq is ADD_GID's request: the guest installs GID at Index
// (1..max_gid-1; index 0 is the device's).
type AddGIDReq struct {
	Port  uint32
	Index uint32
	GID   GID
}

// CreateCQReq is CREATE_CQ's request. The ring is Entries CQEs of
// CQESize bytes at guest physical address RingAddr, CQESize-aligned,
// inside guest RAM. Entries is a power of two, 1..max_cqe.
type CreateCQReq struct {
	RingAddr uint64
	Entries  uint32
	Flags    uint32 // reserved, 0
}

// CreateCQResp is CREATE_CQ's response.
type CreateCQResp struct {
	CQN uint32
	// DoorbellIndex is the CQ's record in the doorbell layout.
	DoorbellIndex uint32
}

// ResizeCQReq is RESIZE_CQ's request: the CQ moves to a new ring.
// Unconsumed CQEs are copied to the new ring at the same indices (modulo
// the new size), so Entries must hold them.
type ResizeCQReq struct {
	CQN      uint32
	Entries  uint32
	RingAddr uint64
}

// CreateQPReq is CREATE_QP's request. SQ and RQ are rings of SQSize and
// RQSize WQEs (powers of two, 1..max_qp_wr) whose strides are
// SendWQEStride(MaxSendSGE, MaxInlineData) and RecvWQEStride(MaxRecvSGE),
// at guest physical addresses aligned to their stride, inside guest RAM.
// A QP with an SRQ (SRQN != 0) has no RQ: RQSize, MaxRecvSGE and RQAddr
// are 0 and its receives come from the SRQ.
type CreateQPReq struct {
	PDN           uint32
	Type          QPType
	SigAll        uint8 // 1: every send WQE completes as if SIGNALED
	Reserved0     uint16
	SendCQN       uint32
	RecvCQN       uint32
	SQSize        uint32
	RQSize        uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	SRQN          uint32 // 0: the QP has its own RQ (ABI 1.1)
	SQAddr        uint64
	RQAddr        uint64
}

// CreateQPResp is CREATE_QP's response.
type CreateQPResp struct {
	QPN           uint32
	DoorbellIndex uint32
	SQStride      uint32 // bytes per send WQE, as the device computed it
	RQStride      uint32 // bytes per receive WQE
}

// AHAttr is an address vector: where an RC QP's peer (or a UD send) goes.
type AHAttr struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	Port         uint8
	Reserved     [7]uint8
}

// QPAttr is the attribute block of MODIFY_QP and QUERY_QP (ibv_qp_attr,
// without the fields vStellar does not have).
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	AccessFlags     Access
	DestQPN         uint32
	RQPSN           uint32
	SQPSN           uint32
	QKey            uint32
	PKeyIndex       uint16
	Port            uint8
	MaxRdAtomic     uint8 // outstanding READ/atomic as initiator
	MaxDestRdAtomic uint8 // as responder
	MinRNRTimer     uint8 // RNRTimerMicros index
	Timeout         uint8 // local ACK timeout: 4.096 us * 2^Timeout, 0 = infinite
	RetryCnt        uint8 // 0..7
	RNRRetry        uint8 // 0..7; 7 = infinite
	SQDraining      uint8 // QUERY_QP only
	Reserved0       uint16
	Reserved1       uint32
	AH              AHAttr
}

// ModifyQPReq is MODIFY_QP's request; AttrMask selects what applies.
type ModifyQPReq struct {
	QPN      uint32
	AttrMask QPAttrMask
	Attr     QPAttr
}

// QPCap describes what a QP was created with (QUERY_QP).
type QPCap struct {
	PDN           uint32
	SendCQN       uint32
	RecvCQN       uint32
	SQSize        uint32
	RQSize        uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	Type          QPType
	SigAll        uint8
	Reserved0     uint16
	SRQN          uint32 // 0: none
}

// QueryQPResp is QUERY_QP's response.
type QueryQPResp struct {
	Attr QPAttr
	Cap  QPCap
}

// MR page list: REG_MR with NPages == 0 registers the guest-physically
// contiguous range [Addr, Addr+Length); with NPages > 0, Addr is the
// guest physical address of an array of NPages le64 page addresses, each
// 1<<PageShift bytes and aligned to it, and IOVA's offset within a page
// is the MR's offset into the first page.
const (
	MaxMRPages = 1 << 20 // page-list entries per REG_MR
)

// RegMRReq is REG_MR's request.
type RegMRReq struct {
	PDN       uint32
	Access    Access
	IOVA      uint64
	Length    uint64
	Addr      uint64
	PageShift uint32
	NPages    uint32
}

// RegMRResp is REG_MR's response.
type RegMRResp struct {
	LKey uint32
	RKey uint32
}

// CreateAHReq is CREATE_AH's request; the response is a HandleResp.
type CreateAHReq struct {
	PDN      uint32
	Reserved uint32
	AH       AHAttr
}

// CreateSRQReq is CREATE_SRQ's request: a ring of Size receive WQEs (a
// power of two, 1..max_srq_wr) of stride RecvWQEStride(MaxSGE) at guest
// physical address RingAddr, aligned to the stride, inside guest RAM.
// Limit arms the limit event at once when non-zero (0 < Limit < Size).
type CreateSRQReq struct {
	PDN      uint32
	Size     uint32
	MaxSGE   uint32
	Limit    uint32
	RingAddr uint64
}

// CreateSRQResp is CREATE_SRQ's response.
type CreateSRQResp struct {
	SRQN          uint32
	DoorbellIndex uint32
	Stride        uint32 // bytes per receive WQE, as the device computed it
	Reserved      uint32
}

// SRQAttrMask selects what MODIFY_SRQ changes (the IBV_SRQ_* bits).
type SRQAttrMask uint32

const (
	// SRQAttrMaxWR resizes the SRQ. Not supported in this version: the
	// device answers NOT_SUPPORTED.
	SRQAttrMaxWR SRQAttrMask = 1 << 0
	// SRQAttrLimit arms the limit event at Limit (0 disarms it).
	SRQAttrLimit SRQAttrMask = 1 << 1

	SRQAttrAll = SRQAttrMaxWR | SRQAttrLimit
)

// ModifySRQReq is MODIFY_SRQ's request.
type ModifySRQReq struct {
	SRQN     uint32
	AttrMask SRQAttrMask
	MaxWR    uint32
	Limit    uint32
}

// SRQAttr is QUERY_SRQ's response.
type SRQAttr struct {
	PDN    uint32
	MaxWR  uint32 // the ring's size
	MaxSGE uint32
	Limit  uint32 // armed limit, 0 when not armed
}

// SetDoorbellAreaReq is SET_DOORBELL_AREA's request (guest-RAM
// fallback): a page-aligned guest RAM range at least as large as the
// doorbell layout, which from then on is IO memory: no MR may cover it
// and no DMA may reach it.
type SetDoorbellAreaReq struct {
	Addr   uint64
	Length uint64
}

// payloadSize is the encoded size of a payload struct.
func payloadSize(v any) int { return binary.Size(v) }

// EncodePayload appends the encoding of a payload struct (a pointer to one
// of the types above) to b.
func EncodePayload(b []byte, v any) []byte {
	out, err := binary.Append(b, binary.LittleEndian, v)
	if err != nil {
		// Only a type outside this package's fixed-size structs fails.
		panic(fmt.Sprintf("abi: encode %T: %v", v, err))
	}
	return out
}

// validator is implemented by payloads with more to check than size.
type validator interface{ Validate() error }

// DecodePayload decodes exactly binary.Size(v) bytes into v (a pointer
// to one of the payload structs) and validates it: reserved fields zero,
// enumerations defined. It does not check values against a device's
// limits; the device does that.
func DecodePayload(b []byte, v any) error {
	want := binary.Size(v)
	if want < 0 {
		return fmt.Errorf("abi: decode %T: not a payload type: %w", v, ErrBadValue)
	}
	if len(b) != want {
		return fmt.Errorf("%T: %d bytes, want %d: %w", v, len(b), want, lenErr(len(b), want))
	}
	if _, err := binary.Decode(b, binary.LittleEndian, v); err != nil {
		return fmt.Errorf("%T: %w", v, err)
	}
	if c, ok := v.(validator); ok {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	return nil
}

func reserved(name string, nonzero bool) error {
	if nonzero {
		return fmt.Errorf("%s: %w", name, ErrReservedNonZero)
	}
	return nil
}

func isZero[T comparable](v T) bool { var z T; return v == z }

// Validate implementations: reserved fields and enumerations.

func (r *HandleReq) Validate() error    { return reserved("handle request", r.Reserved != 0) }
func (r *QueryPortReq) Validate() error { return reserved("query port", r.Reserved != 0) }
func (r *CreateCQReq) Validate() error  { return reserved("create cq flags", r.Flags != 0) }

func (a *AHAttr) Validate() error { return reserved("ah attr", !isZero(a.Reserved)) }

func (r *CreateQPReq) Validate() error {
	if err := reserved("create qp", r.Reserved0 != 0); err != nil {
		return err
	}
	if r.Type != QPTypeRC && r.Type != QPTypeUD {
		return fmt.Errorf("qp type %v: %w", r.Type, ErrBadValue)
	}
	if r.SigAll > 1 {
		return fmt.Errorf("sq_sig_all %d: %w", r.SigAll, ErrBadValue)
	}
	return nil
}

func (a *QPAttr) Validate() error {
	if err := reserved("qp attr", a.Reserved0 != 0 || a.Reserved1 != 0 || a.SQDraining != 0); err != nil {
		return err
	}
	return a.AH.Validate()
}

func (r *ModifyQPReq) Validate() error {
	if r.AttrMask&^QPAttrAll != 0 {
		return fmt.Errorf("modify qp attr_mask %#x: undefined bits: %w", uint32(r.AttrMask), ErrBadValue)
	}
	return r.Attr.Validate()
}

func (r *RegMRReq) Validate() error {
	if err := r.Access.Validate(); err != nil {
		return err
	}
	if r.NPages > MaxMRPages {
		return fmt.Errorf("reg mr: %d pages, at most %d: %w", r.NPages, MaxMRPages, ErrBadValue)
	}
	if r.NPages > 0 && (r.PageShift < 12 || r.PageShift > 30) {
		return fmt.Errorf("reg mr: page shift %d: %w", r.PageShift, ErrBadValue)
	}
	if r.NPages == 0 && r.PageShift != 0 {
		return fmt.Errorf("reg mr: page shift without a page list: %w", ErrReservedNonZero)
	}
	return nil
}

func (r *ModifySRQReq) Validate() error {
	if r.AttrMask&^SRQAttrAll != 0 {
		return fmt.Errorf("modify srq attr_mask %#x: undefined bits: %w", uint32(r.AttrMask), ErrBadValue)
	}
	return nil
}

func (r *CreateAHReq) Validate() error {
	if err := reserved("create ah", r.Reserved != 0); err != nil {
		return err
	}
	return r.AH.Validate()
}
