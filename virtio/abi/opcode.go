package abi

import "fmt"

// Opcode names a control command. Values are ABI: never renumber, only
// append. 0 is not a command, so a zeroed buffer is never a valid request.
type Opcode uint32

// Control-queue opcodes. The request and response payload of each is
// defined by the ABI edition that specifies it (see [Opcode.Specified]);
// docs/spec.md has the table with what the device implements.
const (
	OpQueryDevice     Opcode = 1  // device attributes and limits
	OpQueryPort       Opcode = 2  // port attributes (state, MTU, GID table length)
	OpQueryGID        Opcode = 3  // one GID table entry
	OpAddGID          Opcode = 4  // guest-owned GID into the device's table
	OpDelGID          Opcode = 5  // remove a guest-owned GID
	OpAllocPD         Opcode = 6  // protection domain
	OpDeallocPD       Opcode = 7  //
	OpCreateCQ        Opcode = 8  // CQ ring in guest memory + doorbell record
	OpResizeCQ        Opcode = 9  //
	OpDestroyCQ       Opcode = 10 //
	OpCreateQP        Opcode = 11 // SQ/RQ rings in guest memory + doorbell record
	OpModifyQP        Opcode = 12 // verbs state machine with attribute checks
	OpQueryQP         Opcode = 13 //
	OpDestroyQP       Opcode = 14 //
	OpRegMR           Opcode = 15 // memory region: IOVA range, access flags; pinned on demand
	OpDeregMR         Opcode = 16 //
	OpCreateAH        Opcode = 17 // address handle
	OpDestroyAH       Opcode = 18 //
	OpSetDoorbellArea Opcode = 19 // fallback only: register the guest-RAM doorbell area
	OpResetState      Opcode = 20 // the driver's probe: drop every resource a previous driver left
	OpCreateSRQ       Opcode = 21 // shared receive queue: ring in guest memory + doorbell record (ABI 1.1)
	OpModifySRQ       Opcode = 22 // arm the limit event
	OpQuerySRQ        Opcode = 23 //
	OpDestroySRQ      Opcode = 24 //

	opLast = OpDestroySRQ
)

// opInfo describes an opcode: its name and the exact sizes of its request
// and response payloads (after the headers).
type opInfo struct {
	name     string
	reqSize  int
	respSize int
}

var opTable = [...]opInfo{
	OpQueryDevice:     {"QUERY_DEVICE", QueryDeviceReqSize, DeviceAttrSize},
	OpQueryPort:       {"QUERY_PORT", payloadSize(QueryPortReq{}), payloadSize(PortAttr{})},
	OpQueryGID:        {"QUERY_GID", payloadSize(GIDReq{}), payloadSize(GIDEntry{})},
	OpAddGID:          {"ADD_GID", payloadSize(AddGIDReq{}), 0},
	OpDelGID:          {"DEL_GID", payloadSize(GIDReq{}), 0},
	OpAllocPD:         {"ALLOC_PD", 0, payloadSize(HandleResp{})},
	OpDeallocPD:       {"DEALLOC_PD", payloadSize(HandleReq{}), 0},
	OpCreateCQ:        {"CREATE_CQ", payloadSize(CreateCQReq{}), payloadSize(CreateCQResp{})},
	OpResizeCQ:        {"RESIZE_CQ", payloadSize(ResizeCQReq{}), 0},
	OpDestroyCQ:       {"DESTROY_CQ", payloadSize(HandleReq{}), 0},
	OpCreateQP:        {"CREATE_QP", payloadSize(CreateQPReq{}), payloadSize(CreateQPResp{})},
	OpModifyQP:        {"MODIFY_QP", payloadSize(ModifyQPReq{}), 0},
	OpQueryQP:         {"QUERY_QP", payloadSize(HandleReq{}), payloadSize(QueryQPResp{})},
	OpDestroyQP:       {"DESTROY_QP", payloadSize(HandleReq{}), 0},
	OpRegMR:           {"REG_MR", payloadSize(RegMRReq{}), payloadSize(RegMRResp{})},
	OpDeregMR:         {"DEREG_MR", payloadSize(HandleReq{}), 0},
	OpCreateAH:        {"CREATE_AH", payloadSize(CreateAHReq{}), payloadSize(HandleResp{})},
	OpDestroyAH:       {"DESTROY_AH", payloadSize(HandleReq{}), 0},
	OpSetDoorbellArea: {"SET_DOORBELL_AREA", payloadSize(SetDoorbellAreaReq{}), 0},
	OpResetState:      {"RESET_STATE", 0, 0},
	OpCreateSRQ:       {"CREATE_SRQ", payloadSize(CreateSRQReq{}), payloadSize(CreateSRQResp{})},
	OpModifySRQ:       {"MODIFY_SRQ", payloadSize(ModifySRQReq{}), 0},
	OpQuerySRQ:        {"QUERY_SRQ", payloadSize(HandleReq{}), payloadSize(SRQAttr{})},
	OpDestroySRQ:      {"DESTROY_SRQ", payloadSize(HandleReq{}), 0},
}

// Opcodes returns every defined opcode in numeric order.
func Opcodes() []Opcode {
	ops := make([]Opcode, 0, opLast)
	for op := Opcode(1); op <= opLast; op++ {
		ops = append(ops, op)
	}
	return ops
}

// Known reports whether op is defined by the ABI.
func (op Opcode) Known() bool { return op >= 1 && op <= opLast }

// Specified reports whether this ABI edition defines op's payloads (all
// known opcodes, since ABI 1.0).
func (op Opcode) Specified() bool { return op.Known() }

// RequestSize is the exact size of op's request payload (after the
// header), if specified.
func (op Opcode) RequestSize() (int, bool) {
	if !op.Specified() {
		return 0, false
	}
	return opTable[op].reqSize, true
}

// ResponseSize is the size of op's response payload on success (after
// the response header), if specified.
func (op Opcode) ResponseSize() (int, bool) {
	if !op.Specified() {
		return 0, false
	}
	return opTable[op].respSize, true
}

func (op Opcode) String() string {
	if op.Known() {
		return opTable[op].name
	}
	return fmt.Sprintf("OPCODE_%d", uint32(op))
}
