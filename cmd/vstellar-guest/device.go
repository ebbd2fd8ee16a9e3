//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/guest-driver/virtiopci"
	"github.com/vstellar/vstellar/virtio/abi"
)

// device is the vStellar device as the program holds it: the PCI
// transport, the transport that times the first command, and the opened
// driver. A reopen replaces all three.
type device struct {
	cfg config
	con *console
	log *slog.Logger

	vt  *virtiopci.Transport
	t   *readyTransport
	dev *guestdriver.Device
	// found is when the transport was opened (since program start): the
	// device-ready time of a hot-plugged device counts from it.
	found time.Duration
}

// findPoll is how often the program looks for a device it waits for.
const findPoll = 50 * time.Millisecond

// open finds the device (waiting for it to be plugged in with cfg.wait),
// takes it from the kernel with virtiopci and opens it with the driver.
func (d *device) open(ctx context.Context) error {
	vt, err := d.find(ctx)
	if err != nil {
		return err
	}
	d.con.printf("pci-config %x", vt.PCIConfig())
	d.con.printf("transport up: %s, features %#x (%s), layout %+v", vt.Address(), vt.Features(), abi.FeatureString(vt.Features()), vt.Layout())
	t := &readyTransport{Transport: vt, con: d.con}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	dev, err := guestdriver.Open(cctx, t)
	cancel()
	if err != nil {
		d.closeTransport(vt)
		return err
	}
	d.vt, d.t, d.dev = vt, t, dev
	return nil
}

// find opens the transport, retrying while no device is there if the
// program waits for one.
func (d *device) find(ctx context.Context) (*virtiopci.Transport, error) {
	opts := virtiopci.Options{DeviceID: d.cfg.devID, Address: d.cfg.addr, Poll: d.cfg.poll, HandBack: d.cfg.handBack, Logger: d.log}
	var waitStart time.Duration
	for {
		d.found = d.con.sinceStart()
		vt, err := virtiopci.Open(ctx, opts)
		switch {
		case err == nil:
			if waitStart != 0 {
				d.con.printf("device found at %s after waiting %.1f ms", vt.Address(), ms(d.found-waitStart))
			}
			return vt, nil
		case !d.cfg.wait || !errors.Is(err, virtiopci.ErrNoDevice):
			return nil, err
		case waitStart == 0:
			waitStart = d.found
			d.con.printf("no device yet: waiting for one to be plugged in")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(findPoll):
		}
	}
}

// close closes the driver and the transport (which resets the device).
func (d *device) close() {
	if d.dev != nil {
		d.dev.Close()
	}
	if d.vt != nil {
		d.closeTransport(d.vt)
	}
	d.vt, d.t, d.dev = nil, nil, nil
}

func (d *device) closeTransport(vt *virtiopci.Transport) {
	if !present(vt.Address()) {
		err := vt.Close()
		d.con.printf("transport closed, the device is gone: not reset (error: %v)", err)
		return
	}
	err := vt.Close()
	d.con.printf("transport closed, device reset (error: %v); driver now: %s", err, driverOf(vt.Address()))
}

// reopen is the agent's Options.Reopen: the device is reset and probed
// again, as after a restarted vstellard whose new device knows none of
// the driver's objects. No reboot, no rebind: uio_pci_generic keeps it.
func (d *device) reopen(ctx context.Context) (*guestdriver.Device, error) {
	start := d.con.sinceStart()
	d.con.printf("reopening the device at the host's request")
	d.close()
	if err := d.open(ctx); err != nil {
		d.con.printf("reopen failed: %v", err)
		return nil, err
	}
	d.con.printf("device reopened: ready %.1f ms after the reopen began (doorbells %s)",
		ms(time.Duration(d.t.ready.Load())-start), doorbellMode(d.dev.Config().Status))
	return d.dev, nil
}

// doorbells is the agent's Options.Doorbells.
func (d *device) doorbells() (agent.Region, bool) {
	if d.t == nil {
		return agent.Region{}, false
	}
	if gpa, size, ok := d.t.DoorbellRegion(); ok {
		return agent.Region{GPA: gpa, Size: size}, true
	}
	// The guest-RAM fallback: the area the driver registered.
	a, ok := d.dev.DoorbellArea()
	return agent.Region{GPA: a.GPA, Size: a.Len()}, ok
}

// present reports whether the PCI device at addr is still there (a
// hot-unplug removes its sysfs directory).
func present(addr string) bool {
	_, err := os.Stat("/sys/bus/pci/devices/" + addr)
	return err == nil
}

// watchRemoval calls gone once the device at addr is removed, or
// returns when ctx ends.
func watchRemoval(ctx context.Context, addr string, gone func()) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !present(addr) {
				gone()
				return
			}
		}
	}
}

func doorbellMode(status uint32) string {
	switch {
	case status&abi.ConfigStatusDoorbellShmem != 0:
		return "shmem"
	case status&abi.ConfigStatusDoorbellGuestRAM != 0:
		return "guest-ram"
	}
	return "none"
}
