package vhost

import "fmt"

// Request is a front-end request code (docs/interop/vhost-user.rst,
// "Front-end message types").
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
	ReqCreateCryptoSession Request = 26
	ReqCloseCryptoSession  Request = 27
	ReqPostcopyAdvise      Request = 28
	ReqPostcopyListen      Request = 29
	ReqPostcopyEnd         Request = 30
	ReqGetInflightFD       Request = 31
	ReqSetInflightFD       Request = 32
	ReqGPUSetSocket        Request = 33
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
	ReqGetFeatures: "GET_FEATURES", ReqSetFeatures: "SET_FEATURES", ReqSetOwner: "SET_OWNER",
	ReqResetOwner: "RESET_OWNER", ReqSetMemTable: "SET_MEM_TABLE", ReqSetLogBase: "SET_LOG_BASE",
	ReqSetLogFD: "SET_LOG_FD", ReqSetVringNum: "SET_VRING_NUM", ReqSetVringAddr: "SET_VRING_ADDR",
	ReqSetVringBase: "SET_VRING_BASE", ReqGetVringBase: "GET_VRING_BASE", ReqSetVringKick: "SET_VRING_KICK",
	ReqSetVringCall: "SET_VRING_CALL", ReqSetVringErr: "SET_VRING_ERR",
	ReqGetProtocolFeatures: "GET_PROTOCOL_FEATURES", ReqSetProtocolFeatures: "SET_PROTOCOL_FEATURES",
	ReqGetQueueNum: "GET_QUEUE_NUM", ReqSetVringEnable: "SET_VRING_ENABLE", ReqSendRARP: "SEND_RARP",
	ReqNetSetMTU: "NET_SET_MTU", ReqSetBackendReqFD: "SET_BACKEND_REQ_FD", ReqIOTLBMsg: "IOTLB_MSG",
	ReqSetVringEndian: "SET_VRING_ENDIAN", ReqGetConfig: "GET_CONFIG", ReqSetConfig: "SET_CONFIG",
	ReqCreateCryptoSession: "CREATE_CRYPTO_SESSION", ReqCloseCryptoSession: "CLOSE_CRYPTO_SESSION",
	ReqPostcopyAdvise: "POSTCOPY_ADVISE", ReqPostcopyListen: "POSTCOPY_LISTEN", ReqPostcopyEnd: "POSTCOPY_END",
	ReqGetInflightFD: "GET_INFLIGHT_FD", ReqSetInflightFD: "SET_INFLIGHT_FD", ReqGPUSetSocket: "GPU_SET_SOCKET",
	ReqResetDevice: "RESET_DEVICE", ReqVringKick: "VRING_KICK", ReqGetMaxMemSlots: "GET_MAX_MEM_SLOTS",
	ReqAddMemReg: "ADD_MEM_REG", ReqRemMemReg: "REM_MEM_REG", ReqSetStatus: "SET_STATUS",
	ReqGetStatus: "GET_STATUS", ReqGetSharedObject: "GET_SHARED_OBJECT",
	ReqSetDeviceStateFD: "SET_DEVICE_STATE_FD", ReqCheckDeviceState: "CHECK_DEVICE_STATE",
	ReqGetShmemConfig: "GET_SHMEM_CONFIG",
}

func (r Request) String() string {
	if n, ok := requestNames[r]; ok {
		return n
	}
	return fmt.Sprintf("REQUEST(%d)", uint32(r))
}

// BackendRequest is a back-end request code, sent on the back-end channel
// set up by SET_BACKEND_REQ_FD.
type BackendRequest uint32

// Back-end request codes.
const (
	BackendIOTLBMsg          BackendRequest = 1
	BackendConfigChangeMsg   BackendRequest = 2
	BackendVringHostNotifier BackendRequest = 3
	BackendVringCall         BackendRequest = 4
	BackendVringErr          BackendRequest = 5
	BackendSharedObjectAdd   BackendRequest = 6
	BackendSharedObjectRem   BackendRequest = 7
	BackendSharedObjectLook  BackendRequest = 8
	BackendShmemMap          BackendRequest = 9
	BackendShmemUnmap        BackendRequest = 10
)

func (r BackendRequest) String() string {
	switch r {
	case BackendConfigChangeMsg:
		return "CONFIG_CHANGE_MSG"
	case BackendShmemMap:
		return "SHMEM_MAP"
	case BackendShmemUnmap:
		return "SHMEM_UNMAP"
	}
	return fmt.Sprintf("BACKEND_REQUEST(%d)", uint32(r))
}

// Header flag bits.
const (
	flagVersionMask = 0x3
	flagVersion     = 0x1
	flagReply       = 0x4
	flagNeedReply   = 0x8
	flagReserved    = ^uint32(0xf)
)

// headerSize is the size of the message header: request, flags, size.
const headerSize = 12

// maxPayload bounds a message body. The largest front-end request is
// SET_MEM_TABLE (264 bytes) or a config-space message (12 + 256); anything
// near this bound is hostile.
const maxPayload = 4096

// maxFDs is how many descriptors one message may carry (QEMU's
// VHOST_MEMORY_BASELINE_NREGIONS).
const maxFDs = 8

// ProtocolFeature is a vhost-user protocol feature bit number.
type ProtocolFeature uint

// Protocol feature bits. SHMEM is bit 22: bits 20 and 21 went to
// GET_VRING_BASE_INFLIGHT and GPA_ADDRESSES before the SHMEM series landed.
const (
	ProtoMQ                ProtocolFeature = 0
	ProtoLogShmFD          ProtocolFeature = 1
	ProtoRARP              ProtocolFeature = 2
	ProtoReplyAck          ProtocolFeature = 3
	ProtoMTU               ProtocolFeature = 4
	ProtoBackendReq        ProtocolFeature = 5
	ProtoCrossEndian       ProtocolFeature = 6
	ProtoCryptoSession     ProtocolFeature = 7
	ProtoPagefault         ProtocolFeature = 8
	ProtoConfig            ProtocolFeature = 9
	ProtoBackendSendFD     ProtocolFeature = 10
	ProtoHostNotifier      ProtocolFeature = 11
	ProtoInflightShmFD     ProtocolFeature = 12
	ProtoResetDevice       ProtocolFeature = 13
	ProtoInbandNotify      ProtocolFeature = 14
	ProtoConfigureMemSlots ProtocolFeature = 15
	ProtoStatus            ProtocolFeature = 16
	ProtoXenMmap           ProtocolFeature = 17
	ProtoSharedObject      ProtocolFeature = 18
	ProtoDeviceState       ProtocolFeature = 19
	ProtoGetVringBaseInfl  ProtocolFeature = 20
	ProtoGPAAddresses      ProtocolFeature = 21
	ProtoShmem             ProtocolFeature = 22
)

// Mask returns the feature as a bit mask.
func (f ProtocolFeature) Mask() uint64 { return 1 << f }

// SupportedProtocolFeatures is what this back-end offers.
const SupportedProtocolFeatures = 1<<ProtoMQ | 1<<ProtoReplyAck | 1<<ProtoBackendReq | 1<<ProtoConfig |
	1<<ProtoBackendSendFD | 1<<ProtoInflightShmFD | 1<<ProtoResetDevice | 1<<ProtoConfigureMemSlots |
	1<<ProtoStatus | 1<<ProtoShmem

// FeatureProtocolFeatures is VHOST_USER_F_PROTOCOL_FEATURES, a virtio
// feature bit (the reserved bit 30) that gates the protocol features.
const FeatureProtocolFeatures = 1 << 30
