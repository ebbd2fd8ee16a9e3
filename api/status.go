package api

// VhostCounters are a device's vhost-user counters.
type VhostCounters struct {
	Connections    uint64 `json:"connections"`
	Messages       uint64 `json:"messages"`
	FailedMessages uint64 `json:"failed_messages"`
	ProtocolErrors uint64 `json:"protocol_errors"`
	Kicks          uint64 `json:"kicks"`
	Notifies       uint64 `json:"notifies"`
	BrokenQueues   uint64 `json:"broken_queues"`
}

// DeviceStatus is the answer of GET /v1/devices/{name}/stats.
type DeviceStatus struct {
	DeviceInfo
	NodeGUID  string        `json:"node_guid,omitempty"`
	GID       string        `json:"gid,omitempty"`
	Doorbells string        `json:"doorbells,omitempty"` // "shmem", "guest-ram" or "none" (inactive)
	Objects   *ObjectCounts `json:"objects,omitempty"`
	Limits    *Limits       `json:"limits,omitempty"`
	Memory    *MemoryStatus `json:"memory,omitempty"`
	Traffic   *TrafficStats `json:"traffic,omitempty"`
	Control   *ControlStats `json:"control,omitempty"`
	Vhost     VhostCounters `json:"vhost"`
}

// ObjectCounts are a device's live verbs objects.
type ObjectCounts struct {
	PDs  int `json:"pds"`
	CQs  int `json:"cqs"`
	QPs  int `json:"qps"`
	SRQs int `json:"srqs"`
	MRs  int `json:"mrs"`
	AHs  int `json:"ahs"`
	GIDs int `json:"gids"`
}

// Limits are a device's limits with their JSON names, as DeviceStatus
// shows them and a DeviceSpec's Limits object names them: abi.Limits
// (package virtio/abi), the same fields in the same order, so each
// converts to the other (which the compiler checks).
type Limits struct {
	MaxQP         uint32 `json:"max_qp"`
	MaxCQ         uint32 `json:"max_cq"`
	MaxMR         uint32 `json:"max_mr"`
	MaxPD         uint32 `json:"max_pd"`
	MaxAH         uint32 `json:"max_ah"`
	MaxQPWR       uint32 `json:"max_qp_wr"`
	MaxCQE        uint32 `json:"max_cqe"`
	MaxSGE        uint32 `json:"max_sge"`
	MaxInlineData uint32 `json:"max_inline_data"`
	MaxQPRdAtom   uint32 `json:"max_qp_rd_atom"`
	MaxGID        uint32 `json:"max_gid"`
	MaxSRQ        uint32 `json:"max_srq"`
	MaxSRQWR      uint32 `json:"max_srq_wr"`
	MaxSRQSGE     uint32 `json:"max_srq_sge"`
	MaxMRSize     uint64 `json:"max_mr_size"`
	PageSizeCap   uint64 `json:"page_size_cap"`
}

// MemoryStatus is a device's pinned guest memory.
type MemoryStatus struct {
	PinMode     string `json:"pin_mode"`
	BudgetBytes uint64 `json:"budget_bytes"` // 0: only the host's budget
	PinnedBytes uint64 `json:"pinned_bytes"`
	Pins        uint64 `json:"pins"`
	Unpins      uint64 `json:"unpins"`
	PinFailures uint64 `json:"pin_failures"`
	Evictions   uint64 `json:"evictions"`
	Hits        uint64 `json:"cache_hits"`
	Misses      uint64 `json:"cache_misses"`
	// PinP50 and PinP99 are upper bounds (the histogram's bucket).
	PinP50            Duration `json:"pin_latency_p50"`
	PinP99            Duration `json:"pin_latency_p99"`
	TranslationMisses uint64   `json:"translation_misses"`
}

// TrafficStats is a device's data path.
type TrafficStats struct {
	WQEs          uint64 `json:"wqes"`
	CQEs          uint64 `json:"cqes"`
	ErrorCQEs     uint64 `json:"error_cqes"`
	BytesSent     uint64 `json:"bytes_sent"`
	BytesReceived uint64 `json:"bytes_received"`
	Retries       uint64 `json:"retries"`
	RNRNaks       uint64 `json:"rnr_naks"`
	BadWQEs       uint64 `json:"bad_wqes"`
	CQOverflows   uint64 `json:"cq_overflows"`
	AbandonedQPs  uint64 `json:"abandoned_qps"`
	Wakeups       uint64 `json:"doorbell_wakeups"`
	Sleeps        uint64 `json:"sleeps"`
}

// ControlStats is a device's control path: commands per opcode and
// status (lower-case names, as in docs/spec.md), and the p50 and p99 of
// each opcode's latency.
type ControlStats struct {
	Commands  uint64                 `json:"commands"`
	Failed    uint64                 `json:"failed"`
	Malformed uint64                 `json:"malformed"`
	Dropped   uint64                 `json:"dropped"`
	ByOpcode  map[string]uint64      `json:"by_opcode"`
	ByStatus  map[string]uint64      `json:"by_status"`
	Latency   map[string][2]Duration `json:"latency_p50_p99"`
	Events    EventStats             `json:"events"`
	Resets    uint64                 `json:"resets"`
}

// EventStats are a device's asynchronous events.
type EventStats struct {
	Queued    uint64 `json:"queued"`
	Delivered uint64 `json:"delivered"`
	Dropped   uint64 `json:"dropped"`
	Pending   int    `json:"pending"`
}

// QPStatus is one entry of GET /v1/devices/{name}/qps.
type QPStatus struct {
	QPN     uint32 `json:"qpn"`
	State   string `json:"state"`
	PDN     uint32 `json:"pdn"`
	SendCQN uint32 `json:"send_cqn"`
	RecvCQN uint32 `json:"recv_cqn"`
	SQSize  uint32 `json:"sq_size"`
	RQSize  uint32 `json:"rq_size"`
	DestQPN uint32 `json:"dest_qpn,omitempty"`
	DestGID string `json:"dest_gid,omitempty"`
	PathMTU uint32 `json:"path_mtu,omitempty"`
}

// MRStatus is one entry of GET /v1/devices/{name}/mrs.
type MRStatus struct {
	Key    string `json:"key"` // lkey = rkey, hex
	PDN    uint32 `json:"pdn"`
	Access string `json:"access"`
	IOVA   string `json:"iova"` // hex
	Length uint64 `json:"length"`
	Type   string `json:"type"`
	Valid  bool   `json:"valid"`
}

// QPList and MRList are the listings' answers. Total is the number of
// objects; at most the request's limit of them are listed.
type QPList struct {
	Total int        `json:"total"`
	QPs   []QPStatus `json:"qps"`
}

type MRList struct {
	Total int        `json:"total"`
	MRs   []MRStatus `json:"mrs"`
}
