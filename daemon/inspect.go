package daemon

import (
	"fmt"
	"net/netip"
	"strings"

	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Inspector is a device model that shows operators its state: the
// management API's stats, QP and MR listings and the metrics read it.
// *device.Device implements it; a model without it shows only its
// connection state.
type Inspector interface {
	Snapshot() stellardev.Snapshot
	QPs() []engine.QPInfo
	MRs() []stellardev.MRInfo
}

// vhostStatser is a Backend that counts what it served (*vhost.Backend).
type vhostStatser interface{ Stats() *vhost.Stats }

// DeviceState is everything the daemon knows of one device, read at one
// moment: what GET /v1/devices/{name}/stats and the metrics show.
type DeviceState struct {
	Info DeviceInfo
	// Model is the device model's snapshot; nil for a model that is not
	// an Inspector.
	Model *stellardev.Snapshot
	// Vhost counts the device's vhost-user traffic; zero for a Backend
	// that does not count.
	Vhost VhostCounters
}

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

func vhostCounters(b Backend) VhostCounters {
	s, ok := b.(vhostStatser)
	if !ok {
		return VhostCounters{}
	}
	st := s.Stats()
	return VhostCounters{
		Connections: st.Connections.Load(), Messages: st.Messages.Load(), FailedMessages: st.FailedMsgs.Load(),
		ProtocolErrors: st.ProtocolErrs.Load(), Kicks: st.Kicks.Load(), Notifies: st.Notifies.Load(),
		BrokenQueues: st.BrokenQueues.Load(),
	}
}

// DeviceStatus is the answer of GET /v1/devices/{name}/stats.
type DeviceStatus struct {
	DeviceInfo
	NodeGUID  string        `json:"node_guid,omitempty"`
	GID       string        `json:"gid,omitempty"`
	Doorbells string        `json:"doorbells,omitempty"` // "shmem", "guest-ram" or "none" (inactive)
	Objects   *ObjectCounts `json:"objects,omitempty"`
	Limits    *limitsJSON   `json:"limits,omitempty"`
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
	MRs  int `json:"mrs"`
	AHs  int `json:"ahs"`
	GIDs int `json:"gids"`
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

// Status is the JSON form of the state.
func (s DeviceState) Status() DeviceStatus {
	out := DeviceStatus{DeviceInfo: s.Info, Vhost: s.Vhost}
	m := s.Model
	if m == nil {
		return out
	}
	out.NodeGUID = abi.FormatGUID(m.NodeGUID)
	out.GID = netip.AddrFrom16(m.GID).String()
	out.Doorbells = m.Doorbells.String()
	o := m.Objects
	out.Objects = &ObjectCounts{PDs: o.PDs, CQs: o.CQs, QPs: o.QPs, MRs: o.MRs, AHs: o.AHs, GIDs: o.GIDs}
	l := m.Limits
	out.Limits = (*limitsJSON)(&l)
	p := m.Pins
	out.Memory = &MemoryStatus{PinMode: m.PinMode.String(), BudgetBytes: m.PinBudget, PinnedBytes: p.PinnedBytes,
		Pins: p.Pins, Unpins: p.Unpins, PinFailures: p.PinFailures, Evictions: p.Evictions, Hits: p.Hits, Misses: p.Misses,
		PinP50: quantile(p.PinLatency, 0.5), PinP99: quantile(p.PinLatency, 0.99), TranslationMisses: m.TranslationMisses}
	e := m.Engine
	out.Traffic = &TrafficStats{WQEs: e.WQEs, CQEs: e.CQEs, ErrorCQEs: e.ErrorCQEs, BytesSent: e.BytesSent,
		BytesReceived: e.BytesReceived, Retries: e.Retries, RNRNaks: e.RNRNaks, BadWQEs: e.BadWQEs,
		CQOverflows: e.CQOverflows, AbandonedQPs: e.Abandoned, Wakeups: e.Wakeups, Sleeps: e.Sleeps}
	c := m.Control
	cs := &ControlStats{Commands: c.Commands, Failed: c.Failed, Malformed: c.Malformed, Dropped: c.Dropped,
		ByOpcode: map[string]uint64{}, ByStatus: map[string]uint64{}, Latency: map[string][2]Duration{},
		Events: EventStats{Queued: c.EventsQueued, Delivered: c.EventsDelivered, Dropped: c.EventsDropped, Pending: c.EventsPending},
		Resets: c.Resets}
	for op, n := range c.ByOpcode {
		name := OpcodeName(op)
		cs.ByOpcode[name] = n
		h := c.Latency[op]
		cs.Latency[name] = [2]Duration{quantile(h, 0.5), quantile(h, 0.99)}
	}
	for st, n := range c.ByStatus {
		cs.ByStatus[strings.ToLower(st.String())] = n
	}
	out.Control = cs
	return out
}

func quantile(h latency.Histogram, q float64) Duration {
	return Duration(h.Quantile(q))
}

// OpcodeName is a control opcode's name as metrics and the API show it:
// lower case ("create_qp"); "unknown" for opcode 0, which counts the
// commands whose opcode could not be read or is not defined.
func OpcodeName(op abi.Opcode) string {
	if !op.Known() {
		return "unknown"
	}
	return strings.ToLower(op.String())
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

func qpStatus(q engine.QPInfo) QPStatus {
	s := QPStatus{QPN: q.QPN, State: strings.ToLower(q.State.String()), PDN: q.PDN, SendCQN: q.SendCQN,
		RecvCQN: q.RecvCQN, SQSize: q.SQSize, RQSize: q.RQSize, DestQPN: q.DestQPN}
	if q.DestGID != [16]byte{} {
		s.DestGID = netip.AddrFrom16(q.DestGID).String()
	}
	if q.PathMTU.Valid() {
		s.PathMTU = q.PathMTU.Bytes()
	}
	return s
}

func mrStatus(r stellardev.MRInfo) MRStatus {
	return MRStatus{Key: fmt.Sprintf("%#x", r.Key), PDN: r.PDN, Access: r.Access.String(),
		IOVA: fmt.Sprintf("%#x", r.IOVA), Length: r.Length, Type: r.Type.String(), Valid: r.Valid}
}
