package daemon

import (
	"context"
	"errors"
	"net/http"

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

// NICList is the answer of GET /v1/host/nics: the host's network
// interfaces and RDMA devices as the daemon sees them (in its network
// namespace). RDMAError says why there is no RDMA list, plainly, on a
// host without RDMA support.
type NICList struct {
	Interfaces []hostnet.Interface `json:"interfaces"`
	RDMA       []hostnet.RDMALink  `json:"rdma"`
	RDMAError  string              `json:"rdma_error,omitempty"`
}

// NICs discovers the host's interfaces and RDMA devices where the
// fabric's socket lives (Config.ListenIn).
func (m *Manager) NICs(ctx context.Context) (NICList, error) {
	var l NICList
	discover := func() error {
		var err error
		if l.Interfaces, err = hostnet.Interfaces(ctx); err != nil {
			return err
		}
		l.RDMA, err = hostnet.RDMALinks(ctx)
		switch {
		case errors.Is(err, hostnet.ErrNoRDMA):
			l.RDMAError = err.Error()
		case err != nil:
			return err
		}
		return nil
	}
	var err error
	if m.cfg.ListenIn != nil {
		err = m.cfg.ListenIn(discover)
	} else {
		err = discover()
	}
	if l.RDMA == nil {
		l.RDMA = []hostnet.RDMALink{}
	}
	return l, err
}

func (m *Manager) handleNICs(w http.ResponseWriter, r *http.Request) {
	l, err := m.NICs(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (m *Manager) handlePaths(w http.ResponseWriter, r *http.Request) {
	l, err := m.fabricPaths()
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, l)
}
