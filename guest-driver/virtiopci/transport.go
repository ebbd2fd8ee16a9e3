//go:build linux

package virtiopci

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Options select the device and tune the transport.
type Options struct {
	// DeviceID is the virtio device id to accept (0: abi.DeviceID). A
	// VMM that cannot name id 42 serves the device under a stand-in id.
	DeviceID uint16
	// Address is the PCI address (0000:00:03.0) to take; empty: the
	// first device with the wanted ids.
	Address string
	// Sysfs and Dev are where sysfs and the device nodes are mounted
	// ("/sys" and "/dev" when empty).
	Sysfs, Dev string
	// DMAChunk is how much DMA memory is reserved at a time, in bytes
	// (rounded up to 2 MiB huge pages; 0: 16 MiB).
	DMAChunk uint64
	// Poll: do not use the interrupt; waiters poll the used rings every
	// PollInterval.
	Poll bool
	// PollInterval is how often a waiter rechecks its ring without an
	// interrupt (0: 100 µs when polling; with interrupts, a 10 ms safety
	// net against a lost one).
	PollInterval time.Duration
	// HandBack: Close returns the device to the kernel's virtio_pci
	// driver.
	HandBack bool
	// Logger receives the transport's events (nil: slog.Default()).
	Logger *slog.Logger
}

// Transport is a guestdriver.Transport over a virtio 1.x modern PCI
// device driven from user space through uio_pci_generic.
type Transport struct {
	log    *slog.Logger
	opts   Options
	dev    pciDev
	layout Layout
	// pciConfig is the PCI config space as read at Open.
	pciConfig []byte
	bars      [6]*guestmem.Mapping
	cc        common
	notify    guestmem.View
	isr       guestmem.View
	devcfg    guestmem.View
	shm       guestmem.View // doorbell region; Len 0: none
	shmGPA    uint64        // where the CPU sees it
	dma       *dmaPool
	irq       *intx // nil when polling

	features uint64 // accepted
	queues   []*queue
	poll     time.Duration

	// base is Open's context without its cancellation: the reset at
	// Close must run even after the caller's context has ended.
	base      context.Context
	closeOnce sync.Once
	closeErr  error
}

var _ guestdriver.Transport = (*Transport)(nil)

// Open takes the device from the kernel, maps it, and initialises it up
// to DRIVER_OK with every queue the ABI has. guestdriver.Open can use the
// transport at once.
func Open(ctx context.Context, opts Options) (*Transport, error) {
	if opts.DeviceID == 0 {
		opts.DeviceID = abi.DeviceID
	}
	if opts.Sysfs == "" {
		opts.Sysfs = "/sys"
	}
	if opts.Dev == "" {
		opts.Dev = "/dev"
	}
	if opts.DMAChunk == 0 {
		opts.DMAChunk = 16 << 20
	}
	t := &Transport{log: opts.Logger, opts: opts, poll: opts.PollInterval, base: context.WithoutCancel(ctx)}
	if t.log == nil {
		t.log = slog.Default()
	}
	t.log = t.log.With("component", "virtiopci")
	if t.poll == 0 {
		t.poll = 10 * time.Millisecond
		if opts.Poll {
			t.poll = 100 * time.Microsecond
		}
	}
	if opts.DeviceID > 0xffff-0x1040 {
		return nil, fmt.Errorf("virtiopci: virtio device id %d has no PCI device id", opts.DeviceID)
	}
	dev, err := findDevice(opts.Sysfs, opts.Address, abi.PCIVendorID, 0x1040+opts.DeviceID)
	if err != nil {
		return nil, err
	}
	t.dev = dev
	if err := t.open(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Transport) open(ctx context.Context) error {
	start := time.Now()
	if err := t.dev.rebind(uioDriver); err != nil {
		return err
	}
	node, err := t.dev.uioNode(ctx, t.opts.Dev)
	if err != nil {
		return err
	}
	bound := time.Now()
	cs, err := t.dev.configSpace()
	if err != nil {
		return err
	}
	t.pciConfig = cs
	if t.layout, err = ParseLayout(cs); err != nil {
		return fmt.Errorf("virtiopci: %s: %w", t.dev.addr, err)
	}
	if err := t.dev.setCommand(pciCommandMemory | pciCommandBusMaster); err != nil {
		return err
	}
	if err := t.mapBARs(); err != nil {
		return err
	}
	t.dma = newDMAPool(hugetlb{sysfs: t.opts.Sysfs}, int((t.opts.DMAChunk+hugePageSize-1)/hugePageSize))
	if !t.opts.Poll {
		if t.irq, err = openINTx(node, t.dev.path("config"), t.isr, t.log); err != nil {
			return err
		}
	}
	mapped := time.Now()
	if err := t.initDevice(ctx); err != nil {
		return err
	}
	t.log.Info("device ready", "address", t.dev.addr, "uio", filepath.Base(node),
		"features", fmt.Sprintf("%#x", t.features), "queues", len(t.queues),
		"doorbell_bytes", t.shm.Len(), "interrupts", t.irq != nil,
		"bind", bound.Sub(start).Round(time.Microsecond), "map", mapped.Sub(bound).Round(time.Microsecond),
		"init", time.Since(mapped).Round(time.Microsecond))
	return nil
}

// mapBARs maps every BAR a virtio structure lives in, through its sysfs
// resource file, and cuts the structures' views out of them.
func (t *Transport) mapBARs() error {
	bars, err := t.dev.bars()
	if err != nil {
		return err
	}
	var sizes [6]uint64
	for i, b := range bars {
		sizes[i] = b.size
	}
	if err := t.layout.CheckBARs(sizes); err != nil {
		return fmt.Errorf("virtiopci: %s: %w", t.dev.addr, err)
	}
	view := func(w Window) (guestmem.View, error) {
		if t.bars[w.BAR] == nil {
			m, err := mapResource(t.dev.path(fmt.Sprintf("resource%d", w.BAR)), sizes[w.BAR])
			if err != nil {
				return guestmem.View{}, err
			}
			t.bars[w.BAR] = m
		}
		return t.bars[w.BAR].View().Sub(w.Offset, w.Length)
	}
	var cc guestmem.View
	for _, s := range []struct {
		w   Window
		dst *guestmem.View
	}{{t.layout.Common, &cc}, {t.layout.Notify, &t.notify}, {t.layout.ISR, &t.isr}, {t.layout.DeviceCfg, &t.devcfg}} {
		if *s.dst, err = view(s.w); err != nil {
			return err
		}
	}
	t.cc = common{v: cc}
	if r, ok := t.layout.ShmRegion(abi.DoorbellShmID); ok && r.Length > 0 {
		if t.shm, err = view(r.Window); err != nil {
			return err
		}
		t.shmGPA = bars[r.BAR].start + r.Offset
	}
	return nil
}

// DoorbellRegion is the guest-physical address and size of the doorbell
// region (shared memory region abi.DoorbellShmID) in its BAR; ok is
// false when the device has none.
func (t *Transport) DoorbellRegion() (gpa, size uint64, ok bool) {
	return t.shmGPA, t.shm.Len(), t.shm.Len() > 0
}

// PCIConfig is the device's PCI configuration space as read at Open.
func (t *Transport) PCIConfig() []byte { return append([]byte(nil), t.pciConfig...) }

// Features are the virtio features the driver accepted.
func (t *Transport) Features() uint64 { return t.features }

// Address is the device's PCI address.
func (t *Transport) Address() string { return t.dev.addr }

// Layout is where the device's structures are, from its PCI config space.
func (t *Transport) Layout() Layout { return t.layout }

// Interrupts is the number of interrupts taken so far (0 when polling).
func (t *Transport) Interrupts() uint64 {
	if t.irq == nil {
		return 0
	}
	return t.irq.n.Load()
}

// Close resets the device (so it stops touching DMA memory), stops the
// interrupt reader, unmaps the BARs and the DMA memory and, with
// Options.HandBack, returns the device to the kernel's virtio_pci.
// Buffers and views from the transport must not be used afterwards.
// A device that was hot-unplugged is only let go: its BARs are gone, and
// touching them would fault.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		var errs []error
		gone := t.dev.addr != "" && !t.dev.present()
		if t.cc.v.Len() > 0 && !gone {
			ctx, cancel := context.WithTimeout(t.base, 5*time.Second)
			errs = append(errs, t.cc.reset(ctx))
			cancel()
		}
		if t.irq != nil {
			t.irq.close()
		}
		for i, m := range t.bars {
			if m != nil {
				errs = append(errs, m.Unmap())
				t.bars[i] = nil
			}
		}
		if t.dma != nil {
			errs = append(errs, t.dma.close())
		}
		if t.opts.HandBack && t.dev.addr != "" && !gone {
			errs = append(errs, t.dev.rebind(""))
		}
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
