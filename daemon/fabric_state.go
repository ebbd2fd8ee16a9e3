package daemon

import (
	"cmp"
	"fmt"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/fabric/remote"
)

// fabricState reads the fabric, nil without one.
func (m *Manager) fabricState() *api.FabricState {
	f := m.Fabric()
	if f == nil {
		return nil
	}
	spec := m.cfg.Fabric
	st := f.Stats()
	return &api.FabricState{
		Addr: f.Addr(), Interface: spec.Interface, MTU: f.MTU(), GIDPrefix: spec.GIDPrefix, Paths: max(spec.Paths, 1),
		Spray: cmp.Or(spec.Spray, "single"), CC: cmp.Or(spec.CC, "fixed"), Peers: apiPeers(spec.Peers),
		Stats: api.FabricCounters{Connections: st.Connections, Received: st.Received, Sent: st.Sent,
			SendErrors: st.SendErrors, Malformed: st.Malformed, UnknownConn: st.UnknownConn,
			Foreign: st.Foreign, Refused: st.Refused,
			DataSent: st.DataSent, DataReceived: st.DataReceived, BytesSent: st.BytesSent,
			BytesReceived: st.BytesReceived, BytesPlaced: st.BytesPlaced, Retransmits: st.Retransmits,
			FastRetransmits: st.FastRetransmits, Timeouts: st.Timeouts, Duplicates: st.Duplicates, RNRNaks: st.RNRNaks,
			Spurious: st.SpuriousRetransmits, Busy: st.Busy, BusyNaksSent: st.BusyNaksSent, BusyNaksReceived: st.BusyNaksReceived},
	}
}

// apiPeers is peers in the API's form (nil stays nil: JSON null).
func apiPeers(peers []remote.Peer) []api.Peer {
	if peers == nil {
		return nil
	}
	out := make([]api.Peer, len(peers))
	for i, p := range peers {
		out[i] = api.Peer(p)
	}
	return out
}

// fabricPaths reads the fabric's per-path RTTs; api.ErrNotFound without
// a fabric.
func (m *Manager) fabricPaths() (api.PathList, error) {
	f := m.Fabric()
	if f == nil {
		return api.PathList{}, fmt.Errorf("%w: this daemon has no cross-host fabric", api.ErrNotFound)
	}
	spec := m.cfg.Fabric
	l := api.PathList{Paths: max(spec.Paths, 1), Spray: cmp.Or(spec.Spray, "single"), Active: []api.PathState{}}
	base := f.Addr().Port()
	for _, p := range f.Stats().Paths {
		ps := api.PathState{Path: p.Path, SourcePort: base + uint16(p.Path), Samples: p.RTT.Count}
		if p.RTT.Count > 0 {
			ps.Mean = api.Duration(p.RTT.Sum / time.Duration(p.RTT.Count))
			ps.P50, ps.P99 = quantile(p.RTT, 0.5), quantile(p.RTT, 0.99)
		}
		l.Active = append(l.Active, ps)
	}
	return l, nil
}
