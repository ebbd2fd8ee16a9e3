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

	opLast = OpResetState
)

// opInfo describes an opcode. A payload size of -1 means the layout is not
// specified by this ABI edition yet; the device answers NOT_SUPPORTED.
type opInfo struct {
	name     string
	reqSize  int
	respSize int
}

var opTable = [...]opInfo{
	OpQueryDevice:     {"QUERY_DEVICE", QueryDeviceReqSize, DeviceAttrSize},
	OpQueryPort:       {"QUERY_PORT", -1, -1},
	OpQueryGID:        {"QUERY_GID", -1, -1},
	OpAddGID:          {"ADD_GID", -1, -1},
	OpDelGID:          {"DEL_GID", -1, -1},
	OpAllocPD:         {"ALLOC_PD", -1, -1},
	OpDeallocPD:       {"DEALLOC_PD", -1, -1},
	OpCreateCQ:        {"CREATE_CQ", -1, -1},
	OpResizeCQ:        {"RESIZE_CQ", -1, -1},
	OpDestroyCQ:       {"DESTROY_CQ", -1, -1},
	OpCreateQP:        {"CREATE_QP", -1, -1},
	OpModifyQP:        {"MODIFY_QP", -1, -1},
	OpQueryQP:         {"QUERY_QP", -1, -1},
	OpDestroyQP:       {"DESTROY_QP", -1, -1},
	OpRegMR:           {"REG_MR", -1, -1},
	OpDeregMR:         {"DEREG_MR", -1, -1},
	OpCreateAH:        {"CREATE_AH", -1, -1},
	OpDestroyAH:       {"DESTROY_AH", -1, -1},
	OpSetDoorbellArea: {"SET_DOORBELL_AREA", -1, -1},
	OpResetState:      {"RESET_STATE", 0, 0},
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

// Specified reports whether this ABI edition defines op's payloads.
func (op Opcode) Specified() bool { return op.Known() && opTable[op].reqSize >= 0 }

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
