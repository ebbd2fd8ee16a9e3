//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guest-driver/virtiopci"
	"github.com/vstellar/vstellar/virtio/abi"
)

// readyTransport records when the first control command completed: the
// device-ready time.
type readyTransport struct {
	*virtiopci.Transport
	con   *console
	ready atomic.Int64 // time since program start, ns; 0 until then
}

func (t *readyTransport) Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error) {
	resp, err := t.Transport.Command(ctx, req, respLen)
	if err == nil && t.ready.Load() == 0 {
		t.ready.CompareAndSwap(0, int64(t.con.sinceStart()))
	}
	return resp, err
}

// result is the probe's summary, printed as one JSON line for the host.
type result struct {
	Address       string  `json:"address"`
	ReadyMS       float64 `json:"device_ready_ms"`
	ReadyUptimeMS float64 `json:"ready_uptime_ms"`
	OpenMS        float64 `json:"open_ms"`
	Features      string  `json:"features"`
	Status        uint32  `json:"config_status"`
	Doorbells     string  `json:"doorbells"`
	Interrupts    uint64  `json:"interrupts"`
	VendorID      uint32  `json:"vendor_id"`
	PartID        uint32  `json:"part_id"`
	MaxQP         uint32  `json:"max_qp"`
	MaxMRSize     uint64  `json:"max_mr_size"`
	PortState     uint32  `json:"port_state"`
	ActiveMTU     uint32  `json:"active_mtu"`
	GID           string  `json:"gid"`
}

// work opens the device and probes it or serves the agent; it returns
// the exit status. With cfg.wait a device that is unplugged is released
// and waited for again.
func work(cfg config, con *console) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(con, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if cfg.mode == "exec" {
		return serveExec(ctx, cfg, con, log)
	}
	for {
		con.printf("opening virtio device id %d (PCI %04x:%04x), mode %s", cfg.devID, abi.PCIVendorID, 0x1040+int(cfg.devID), cfg.mode)
		d := &device{cfg: cfg, con: con, log: log}
		if err := d.open(ctx); err != nil {
			con.printf("FAIL open: %v", err)
			return 1
		}
		res, err := probe(ctx, d.dev, d.t, con, d.found)
		if err != nil {
			con.printf("FAIL probe: %v", err)
			d.close()
			return 1
		}
		j, _ := json.Marshal(res)
		con.printf("probe-result %s", j)
		if cfg.mode == "probe" {
			con.printf("PASS probe")
			d.close()
			return 0
		}
		status, removed := serveAgent(ctx, cfg, d, con, log)
		if !removed {
			d.close()
			return status
		}
		// Its registers are gone: the transport unmaps and lets go
		// without touching them.
		d.close()
		con.printf("device removed: released it")
		if !cfg.wait {
			return 1
		}
	}
}

func probe(ctx context.Context, dev *guestdriver.Device, t *readyTransport, con *console, openStart time.Duration) (result, error) {
	ready := time.Duration(t.ready.Load())
	con.printf("device ready %.1f ms after start, %.1f ms after the transport began to open (first control command completed; transport opened at %.1f ms)",
		ms(ready), ms(ready-openStart), ms(openStart))
	cfg := dev.Config()
	mode := doorbellMode(cfg.Status)
	con.printf("config: abi %d.%d, status %#x (doorbells %s), %d doorbell pages of %d",
		cfg.ABIVersion>>16, cfg.ABIVersion&0xffff, cfg.Status, mode, cfg.Doorbell.Pages, cfg.Doorbell.PageSize)
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := dev.QueryDevice(qctx)
	if err != nil {
		return result{}, err
	}
	con.printf("QUERY_DEVICE: vendor %#x part %#x fw %#x guid %s max_qp %d max_cq %d max_mr %d max_mr_size %#x max_sge %d atomic %d ports %d",
		a.VendorID, a.VendorPartID, a.FWVersion, abi.FormatGUID(a.NodeGUID), a.MaxQP, a.MaxCQ, a.MaxMR, a.MaxMRSize, a.MaxSGE, a.AtomicCap, a.PhysPortCnt)
	p, err := dev.QueryPort(qctx, guestdriver.Port)
	if err != nil {
		return result{}, err
	}
	con.printf("QUERY_PORT %d: state %d phys %d mtu %d/%d gids %d max_msg %d link_layer %d",
		guestdriver.Port, p.State, p.PhysState, p.ActiveMTU, p.MaxMTU, p.GIDTableLen, p.MaxMsgSize, p.LinkLayer)
	gid := dev.GID()
	return result{
		Address: t.Address(), ReadyMS: ms(ready), ReadyUptimeMS: ms(t.con.start + ready), OpenMS: ms(openStart),
		Features: fmt.Sprintf("%#x", t.Features()), Status: cfg.Status, Doorbells: mode, Interrupts: t.Interrupts(),
		VendorID: a.VendorID, PartID: a.VendorPartID, MaxQP: a.MaxQP, MaxMRSize: a.MaxMRSize,
		PortState: uint32(p.State), ActiveMTU: uint32(p.ActiveMTU), GID: net.IP(gid[:]).String(),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// driverOf names the kernel driver bound to the PCI device at addr.
func driverOf(addr string) string {
	l, err := os.Readlink("/sys/bus/pci/devices/" + addr + "/driver")
	if err != nil {
		return "no driver"
	}
	return filepath.Base(l)
}
