package api

import (
	"net/netip"

	"github.com/vstellar/vstellar/hostnet"
)

// HostStatus is the answer of GET /v1/host: what the daemon's devices
// share.
type HostStatus struct {
	Devices int          `json:"devices"`
	Memory  HostMemory   `json:"memory"`
	Fabric  *FabricState `json:"fabric,omitempty"`
}

// HostMemory is the host's pinned guest memory, all devices together.
type HostMemory struct {
	BudgetBytes uint64   `json:"budget_bytes"` // 0: none
	PinnedBytes uint64   `json:"pinned_bytes"`
	Pins        uint64   `json:"pins"`
	Unpins      uint64   `json:"unpins"`
	PinFailures uint64   `json:"pin_failures"`
	Evictions   uint64   `json:"evictions"`
	PinP50      Duration `json:"pin_latency_p50"`
	PinP99      Duration `json:"pin_latency_p99"`
}

// FabricState is the cross-host fabric as GET /v1/host shows it.
type FabricState struct {
	Addr      netip.AddrPort `json:"addr"`
	Interface string         `json:"interface,omitempty"`
	MTU       int            `json:"mtu"`
	GIDPrefix netip.Prefix   `json:"gid_prefix"`
	Paths     int            `json:"paths"`
	Spray     string         `json:"spray"`
	CC        string         `json:"cc"`
	Peers     []Peer         `json:"peers"`
	Stats     FabricCounters `json:"stats"`
}

// Peer is another host of the fabric: the GIDs it serves and its UDP
// address (fabric/remote's Peer, of which it is the JSON form).
type Peer struct {
	GIDPrefix netip.Prefix   `json:"gid_prefix"`
	Addr      netip.AddrPort `json:"address"`
}

// String writes the peer as vstellard's --peer flag takes it:
// "prefix=address:port".
func (p Peer) String() string { return p.GIDPrefix.String() + "=" + p.Addr.String() }

// FabricCounters are the fabric's counters.
type FabricCounters struct {
	Connections int    `json:"connections"`
	Received    uint64 `json:"datagrams_received"`
	Sent        uint64 `json:"datagrams_sent"`
	SendErrors  uint64 `json:"send_errors"`
	Malformed   uint64 `json:"malformed"`
	UnknownConn uint64 `json:"unknown_connection"`
	Foreign     uint64 `json:"foreign"`
	Refused     uint64 `json:"refused"`

	DataSent        uint64 `json:"data_packets_sent"`
	DataReceived    uint64 `json:"data_packets_received"`
	BytesSent       uint64 `json:"payload_bytes_sent"`
	BytesReceived   uint64 `json:"payload_bytes_received"`
	BytesPlaced     uint64 `json:"payload_bytes_placed"`
	Retransmits     uint64 `json:"retransmits"`
	FastRetransmits uint64 `json:"fast_retransmits"`
	Timeouts        uint64 `json:"timeouts"`
	Duplicates      uint64 `json:"duplicates"`
	RNRNaks         uint64 `json:"rnr_naks"`
	// Spurious: retransmissions found unneeded (the first copy arrived).
	Spurious uint64 `json:"spurious_retransmits"`
	// Busy: DATA packets dropped unreceived because their device was in a
	// control change; their senders resend them.
	Busy uint64 `json:"device_busy_drops"`
	// BusyNaksSent and BusyNaksReceived: BUSY NAKs this host sent for
	// them, and received from peers whose device was busy (the sender
	// waits without counting a loss; docs/wire.md).
	BusyNaksSent     uint64 `json:"busy_naks_sent"`
	BusyNaksReceived uint64 `json:"busy_naks_received"`
}

// PathState is one path of GET /v1/host/paths: its UDP source port and
// the round-trip times measured on it.
type PathState struct {
	Path       int      `json:"path"`
	SourcePort uint16   `json:"source_port"`
	Samples    uint64   `json:"rtt_samples"`
	Mean       Duration `json:"rtt_mean"`
	P50        Duration `json:"rtt_p50"` // upper bounds (histogram buckets)
	P99        Duration `json:"rtt_p99"`
}

// PathList is the answer of GET /v1/host/paths: the fabric's paths that
// carried traffic (RTT samples), of Paths configured.
type PathList struct {
	Paths  int         `json:"paths"`
	Spray  string      `json:"spray"`
	Active []PathState `json:"active"`
}

// NICList is the answer of GET /v1/host/nics: the host's network
// interfaces and RDMA devices as the daemon sees them (in its network
// namespace). RDMAError says why there is no RDMA list, plainly, on a
// host without RDMA support.
type NICList struct {
	Interfaces []hostnet.Interface `json:"interfaces"`
	RDMA       []hostnet.RDMALink  `json:"rdma"`
	RDMAError  string              `json:"rdma_error,omitempty"`
}
