package frontend

import "fmt"

// Request is a front-end request code (vhost-user.rst, "Front-end message
// types").
type Request uint32

// Front-end request codes.
const (
	ReqGetFeatures         Request = 1
	ReqSetFeatures         Request = 2
	ReqSetOwner            Request = 3
	ReqResetOwner          Request = 4
	ReqSetMemTable         Request = 5
	ReqSetLogBase          Request = 6
	ReqSetLogFD            Request = 7
	ReqSetVringNum         Request = 8
	ReqSetVringAddr        Request = 9
	ReqSetVringBase        Request = 10
	ReqGetVringBase        Request = 11
	ReqSetVringKick        Request = 12
	ReqSetVringCall        Request = 13
	ReqSetVringErr         Request = 14
	ReqGetProtocolFeatures Request = 15
	ReqSetProtocolFeatures Request = 16
	ReqGetQueueNum         Request = 17
	ReqSetVringEnable      Request = 18
	ReqSendRARP            Request = 19
	ReqNetSetMTU           Request = 20
	ReqSetBackendReqFD     Request = 21
	ReqIOTLBMsg            Request = 22
	ReqSetVringEndian      Request = 23
	ReqGetConfig           Request = 24
	ReqSetConfig           Request = 25
	ReqGetInflightFD       Request = 31
	ReqSetInflightFD       Request = 32
	ReqResetDevice         Request = 34
	ReqVringKick           Request = 35
	ReqGetMaxMemSlots      Request = 36
	ReqAddMemReg           Request = 37
	ReqRemMemReg           Request = 38
	ReqSetStatus           Request = 39
	ReqGetStatus           Request = 40
	ReqGetSharedObject     Request = 41
	ReqSetDeviceStateFD    Request = 42
	ReqCheckDeviceState    Request = 43
	ReqGetShmemConfig      Request = 44
)

var requestNames = map[Request]string{
	1: "GET_FEATURES", 2: "SET_FEATURES", 3: "SET_OWNER", 4: "RESET_OWNER",
	5: "SET_MEM_TABLE", 6: "SET_LOG_BASE", 7: "SET_LOG_FD", 8: "SET_VRING_NUM",
	9: "SET_VRING_ADDR", 10: "SET_VRING_BASE", 11: "GET_VRING_BASE",
	12: "SET_VRING_KICK", 13: "SET_VRING_CALL", 14: "SET_VRING_ERR",
	15: "GET_PROTOCOL_FEATURES", 16: "SET_PROTOCOL_FEATURES", 17: "GET_QUEUE_NUM",
	18: "SET_VRING_ENABLE", 19: "SEND_RARP", 20: "NET_SET_MTU",
	21: "SET_BACKEND_REQ_FD", 22: "IOTLB_MSG", 23: "SET_VRING_ENDIAN",
	24: "GET_CONFIG", 25: "SET_CONFIG", 31: "GET_INFLIGHT_FD", 32: "SET_INFLIGHT_FD",
	34: "RESET_DEVICE", 35: "VRING_KICK", 36: "GET_MAX_MEM_SLOTS", 37: "ADD_MEM_REG",
	38: "REM_MEM_REG", 39: "SET_STATUS", 40: "GET_STATUS", 41: "GET_SHARED_OBJECT",
	42: "SET_DEVICE_STATE_FD", 43: "CHECK_DEVICE_STATE", 44: "GET_SHMEM_CONFIG",
}

func (r Request) String() string {
	if n, ok := requestNames[r]; ok {
		return n
	}
	return fmt.Sprintf("REQUEST_%d", uint32(r))
}

// BackendRequest is a back-end request code, sent on the back-end channel.
type BackendRequest uint32

// Back-end request codes.
const (
	BackendIOTLBMsg          BackendRequest = 1
	BackendConfigChange      BackendRequest = 2
	BackendVringHostNotifier BackendRequest = 3
	BackendVringCall         BackendRequest = 4
	BackendVringErr          BackendRequest = 5
	BackendSharedObjectAdd   BackendRequest = 6
	BackendSharedObjectRem   BackendRequest = 7
	BackendSharedObjectGet   BackendRequest = 8
	BackendShmemMap          BackendRequest = 9
	BackendShmemUnmap        BackendRequest = 10
)

func (r BackendRequest) String() string {
	switch r {
	case BackendIOTLBMsg:
		return "BACKEND_IOTLB_MSG"
	case BackendConfigChange:
		return "BACKEND_CONFIG_CHANGE_MSG"
	case BackendVringHostNotifier:
		return "BACKEND_VRING_HOST_NOTIFIER_MSG"
	case BackendVringCall:
		return "BACKEND_VRING_CALL"
	case BackendVringErr:
		return "BACKEND_VRING_ERR"
	case BackendSharedObjectAdd:
		return "BACKEND_SHARED_OBJECT_ADD"
	case BackendSharedObjectRem:
		return "BACKEND_SHARED_OBJECT_REMOVE"
	case BackendSharedObjectGet:
		return "BACKEND_SHARED_OBJECT_LOOKUP"
	case BackendShmemMap:
		return "BACKEND_SHMEM_MAP"
	case BackendShmemUnmap:
		return "BACKEND_SHMEM_UNMAP"
	}
	return fmt.Sprintf("BACKEND_REQUEST_%d", uint32(r))
}

// Header flag bits.
const (
	FlagVersionMask = 0x3
	Version         = 0x1
	FlagReply       = 0x4
	FlagNeedReply   = 0x8
)

// HeaderSize is the size of the message header: u32 request, u32 flags,
// u32 size.
const HeaderSize = 12

// Protocol feature bits (GET/SET_PROTOCOL_FEATURES).
const (
	ProtoMQ                = 0
	ProtoLogShmFD          = 1
	ProtoRARP              = 2
	ProtoReplyAck          = 3
	ProtoMTU               = 4
	ProtoBackendReq        = 5
	ProtoCrossEndian       = 6
	ProtoCryptoSession     = 7
	ProtoPagefault         = 8
	ProtoConfig            = 9
	ProtoBackendSendFD     = 10
	ProtoHostNotifier      = 11
	ProtoInflightShmFD     = 12
	ProtoResetDevice       = 13
	ProtoInbandNotify      = 14
	ProtoConfigureMemSlots = 15
	ProtoStatus            = 16
	ProtoXenMmap           = 17
	ProtoSharedObject      = 18
	ProtoDeviceState       = 19
	ProtoGetVringBaseInfl  = 20
	ProtoGPAAddresses      = 21
	ProtoShmem             = 22
)

// SupportedProtocolFeatures is the set of protocol features this front-end
// implements and therefore accepts from a back-end. It deliberately lacks
// bits 20 and 21: a back-end that advertises SHMEM as 20 or 21 (older
// drafts, rust-vmm vhost 0.16) does not get SHMEM.
const SupportedProtocolFeatures uint64 = 1<<ProtoMQ | 1<<ProtoLogShmFD | 1<<ProtoReplyAck |
	1<<ProtoBackendReq | 1<<ProtoConfig | 1<<ProtoBackendSendFD | 1<<ProtoInflightShmFD |
	1<<ProtoResetDevice | 1<<ProtoConfigureMemSlots | 1<<ProtoStatus | 1<<ProtoShmem

// Virtio feature bits the front-end itself cares about.
const (
	// FeatureProtocolFeatures is VHOST_USER_F_PROTOCOL_FEATURES, a virtio
	// feature bit (GET/SET_FEATURES).
	FeatureProtocolFeatures = 30
	// FeatureLogAll is VHOST_F_LOG_ALL (dirty logging).
	FeatureLogAll = 26
)

// Virtio device status bits (SET_STATUS/GET_STATUS).
const (
	StatusAcknowledge = 1
	StatusDriver      = 2
	StatusDriverOK    = 4
	StatusFeaturesOK  = 8
	StatusNeedsReset  = 64
	StatusFailed      = 128
)

// Limits from the specification and QEMU.
const (
	// MaxMemRegions is VHOST_MEMORY_BASELINE_NREGIONS: SET_MEM_TABLE
	// carries at most this many regions.
	MaxMemRegions = 8
	// MaxConfigSize is VHOST_USER_MAX_CONFIG_SIZE.
	MaxConfigSize = 256
	// ConfigHeaderSize is the offset, size and flags before config bytes.
	ConfigHeaderSize = 12
	// MaxShmemRegions is the number of shmids in GET_SHMEM_CONFIG.
	MaxShmemRegions = 256
	// MaxBackendFDs bounds the fds on one back-end message.
	MaxBackendFDs = 8
	// maxPayload bounds any payload we accept (the largest defined reply
	// is GET_SHMEM_CONFIG's 2056 bytes; QEMU's payload union is larger
	// only because of crypto sessions).
	maxPayload = 4096
)

// Vring fd message bits (SET_VRING_KICK/CALL/ERR).
const (
	VringIndexMask = 0xff
	VringNoFD      = 1 << 8
)

// VringFlagLog is VHOST_VRING_F_LOG in SET_VRING_ADDR flags.
const VringFlagLog = 1 << 0

// ShmemMapRW is the read-write flag of a SHMEM_MAP request.
const ShmemMapRW = 1 << 0
