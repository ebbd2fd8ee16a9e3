package daemon

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vstellar/vstellar/api"
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
	Info api.DeviceInfo
	// Model is the device model's snapshot; nil for a model that is not
	// an Inspector.
	Model *stellardev.Snapshot
	// Vhost counts the device's vhost-user traffic; zero for a Backend
	// that does not count.
	Vhost api.VhostCounters
}

func vhostCounters(b Backend) api.VhostCounters {
	s, ok := b.(vhostStatser)
	if !ok {
		return api.VhostCounters{}
	}
	st := s.Stats()
	return api.VhostCounters{
		Connections: st.Connections.Load(), Messages: st.Messages.Load(), FailedMessages: st.FailedMsgs.Load(),
		ProtocolErrors: st.ProtocolErrs.Load(), Kicks: st.Kicks.Load(), Notifies: st.Notifies.Load(),
		BrokenQueues: st.BrokenQueues.Load(),
	}
}

// Status is the JSON form of the state.
func (s DeviceState) Status() api.DeviceStatus {
	out := api.DeviceStatus{DeviceInfo: s.Info, Vhost: s.Vhost}
	m := s.Model
	if m == nil {
		return out
	}
	out.NodeGUID = abi.FormatGUID(m.NodeGUID)
	out.GID = netip.AddrFrom16(m.GID).String()
	out.Doorbells = m.Doorbells.String()
	o := m.Objects
	out.Objects = &api.ObjectCounts{PDs: o.PDs, CQs: o.CQs, QPs: o.QPs, SRQs: o.SRQs, MRs: o.MRs, AHs: o.AHs, GIDs: o.GIDs}
	l := m.Limits
	out.Limits = (*api.Limits)(&l)
	p := m.Pins
	out.Memory = &api.MemoryStatus{PinMode: m.PinMode.String(), BudgetBytes: m.PinBudget, PinnedBytes: p.PinnedBytes,
		Pins: p.Pins, Unpins: p.Unpins, PinFailures: p.PinFailures, Evictions: p.Evictions, Hits: p.Hits, Misses: p.Misses,
		PinP50: quantile(p.PinLatency, 0.5), PinP99: quantile(p.PinLatency, 0.99), TranslationMisses: m.TranslationMisses}
	e := m.Engine
	out.Traffic = &api.TrafficStats{WQEs: e.WQEs, CQEs: e.CQEs, ErrorCQEs: e.ErrorCQEs, BytesSent: e.BytesSent,
		BytesReceived: e.BytesReceived, Retries: e.Retries, RNRNaks: e.RNRNaks, BadWQEs: e.BadWQEs,
		CQOverflows: e.CQOverflows, AbandonedQPs: e.Abandoned, Wakeups: e.Wakeups, Sleeps: e.Sleeps}
	c := m.Control
	cs := &api.ControlStats{Commands: c.Commands, Failed: c.Failed, Malformed: c.Malformed, Dropped: c.Dropped,
		ByOpcode: map[string]uint64{}, ByStatus: map[string]uint64{}, Latency: map[string][2]api.Duration{},
		Events: api.EventStats{Queued: c.EventsQueued, Delivered: c.EventsDelivered, Dropped: c.EventsDropped, Pending: c.EventsPending},
		Resets: c.Resets}
	for op, n := range c.ByOpcode {
		name := OpcodeName(op)
		cs.ByOpcode[name] = n
		h := c.Latency[op]
		cs.Latency[name] = [2]api.Duration{quantile(h, 0.5), quantile(h, 0.99)}
	}
	for st, n := range c.ByStatus {
		cs.ByStatus[strings.ToLower(st.String())] = n
	}
	out.Control = cs
	return out
}

func quantile(h latency.Histogram, q float64) api.Duration {
	return api.Duration(h.Quantile(q))
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

func qpStatus(q engine.QPInfo) api.QPStatus {
	s := api.QPStatus{QPN: q.QPN, State: strings.ToLower(q.State.String()), PDN: q.PDN, SendCQN: q.SendCQN,
		RecvCQN: q.RecvCQN, SQSize: q.SQSize, RQSize: q.RQSize, DestQPN: q.DestQPN}
	if q.DestGID != [16]byte{} {
		s.DestGID = netip.AddrFrom16(q.DestGID).String()
	}
	if q.PathMTU.Valid() {
		s.PathMTU = q.PathMTU.Bytes()
	}
	return s
}

func mrStatus(r stellardev.MRInfo) api.MRStatus {
	return api.MRStatus{Key: fmt.Sprintf("%#x", r.Key), PDN: r.PDN, Access: r.Access.String(),
		IOVA: fmt.Sprintf("%#x", r.IOVA), Length: r.Length, Type: r.Type.String(), Valid: r.Valid}
}
