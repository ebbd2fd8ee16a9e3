package daemon

import (
	"net/netip"

	"github.com/vstellar/vstellar/fabric/remote"
)

// FabricState is the cross-host fabric as GET /v1/host shows it.
type FabricState struct {
	Addr      netip.AddrPort `json:"addr"`
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
		Addr: f.Addr(), GIDPrefix: spec.GIDPrefix, Paths: max(spec.Paths, 1),
		Spray: orDefault(spec.Spray, "single"), CC: orDefault(spec.CC, "fixed"), Peers: spec.Peers,
		Stats: FabricCounters{Connections: st.Connections, Received: st.Received, Sent: st.Sent,
			SendErrors: st.SendErrors, Malformed: st.Malformed, UnknownConn: st.UnknownConn,
			Foreign: st.Foreign, Refused: st.Refused},
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
