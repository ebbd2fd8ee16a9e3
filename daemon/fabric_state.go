package daemon

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"github.com/vstellar/vstellar/fabric/remote"
)

// FabricState is the cross-host fabric as GET /v1/host shows it.
type FabricState struct {
	Addr      netip.AddrPort `json:"addr"`
	Interface string         `json:"interface,omitempty"`
	MTU       int            `json:"mtu"`
	GIDPrefix netip.Prefix   `json:"gid_prefix"`
	Paths     int            `json:"paths"`
	Spray     string         `json:"spray"`
	CC        string         `json:"cc"`
	Peers     []remote.Peer  `json:"peers"`
	Stats     FabricCounters `json:"stats"`
}

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

// fabricState reads the fabric, nil without one.
func (m *Manager) fabricState() *FabricState {
	f := m.Fabric()
	if f == nil {
		return nil
	}
	spec := m.cfg.Fabric
	st := f.Stats()
	return &FabricState{
		Addr: f.Addr(), Interface: spec.Interface, MTU: f.MTU(), GIDPrefix: spec.GIDPrefix, Paths: max(spec.Paths, 1),
		Spray: cmp.Or(spec.Spray, "single"), CC: cmp.Or(spec.CC, "fixed"), Peers: spec.Peers,
		Stats: FabricCounters{Connections: st.Connections, Received: st.Received, Sent: st.Sent,
			SendErrors: st.SendErrors, Malformed: st.Malformed, UnknownConn: st.UnknownConn,
			Foreign: st.Foreign, Refused: st.Refused,
			DataSent: st.DataSent, DataReceived: st.DataReceived, BytesSent: st.BytesSent,
			BytesReceived: st.BytesReceived, BytesPlaced: st.BytesPlaced, Retransmits: st.Retransmits,
			FastRetransmits: st.FastRetransmits, Timeouts: st.Timeouts, Duplicates: st.Duplicates, RNRNaks: st.RNRNaks,
			Spurious: st.SpuriousRetransmits, Busy: st.Busy, BusyNaksSent: st.BusyNaksSent, BusyNaksReceived: st.BusyNaksReceived},
	}
}

// fabricPaths reads the fabric's per-path RTTs; ErrNotFound without a
// fabric.
func (m *Manager) fabricPaths() (PathList, error) {
	f := m.Fabric()
	if f == nil {
		return PathList{}, fmt.Errorf("%w: this daemon has no cross-host fabric", ErrNotFound)
	}
	spec := m.cfg.Fabric
	l := PathList{Paths: max(spec.Paths, 1), Spray: cmp.Or(spec.Spray, "single"), Active: []PathState{}}
	base := f.Addr().Port()
	for _, p := range f.Stats().Paths {
		ps := PathState{Path: p.Path, SourcePort: base + uint16(p.Path), Samples: p.RTT.Count}
		if p.RTT.Count > 0 {
			ps.Mean = Duration(p.RTT.Sum / time.Duration(p.RTT.Count))
			ps.P50, ps.P99 = quantile(p.RTT, 0.5), quantile(p.RTT, 0.99)
		}
		l.Active = append(l.Active, ps)
	}
	return l, nil
}
