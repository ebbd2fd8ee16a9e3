package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/hostnet"
)

// Host reads the host's state.
func (m *Manager) Host() api.HostStatus {
	p := m.PinStats()
	h := api.HostStatus{
		Devices: len(m.readyDevices()),
		Memory: api.HostMemory{BudgetBytes: m.PinLimit(), PinnedBytes: p.PinnedBytes, Pins: p.Pins, Unpins: p.Unpins,
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

// NICs discovers the host's interfaces and RDMA devices where the
// fabric's socket lives (Config.ListenIn).
func (m *Manager) NICs(ctx context.Context) (api.NICList, error) {
	var l api.NICList
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
