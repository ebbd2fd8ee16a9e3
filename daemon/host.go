package daemon

import (
	"net/http"
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

// Host reads the host's state.
func (m *Manager) Host() HostStatus {
	p := m.PinStats()
	h := HostStatus{
		Devices: len(m.readyDevices()),
		Memory: HostMemory{BudgetBytes: m.PinLimit(), PinnedBytes: p.PinnedBytes, Pins: p.Pins, Unpins: p.Unpins,
			PinFailures: p.PinFailures, Evictions: p.Evictions,
			PinP50: quantile(p.PinLatency, 0.5), PinP99: quantile(p.PinLatency, 0.99)},
	}
	if f := m.fabricState(); f != nil {
		h.Fabric = f
	}
	return h
}

func (m *Manager) handleHost(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, m.Host())
}
