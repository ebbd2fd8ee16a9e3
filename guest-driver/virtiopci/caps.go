//go:build linux

package virtiopci

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// PCI configuration header fields this package reads.
const (
	pciVendorID   = 0x00
	pciDeviceID   = 0x02
	pciCommand    = 0x04
	pciStatus     = 0x06
	pciCapPointer = 0x34
	pciHeaderLen  = 0x40 // capabilities start at or after it

	pciCommandMemory    = 1 << 1
	pciCommandBusMaster = 1 << 2
	pciStatusCapList    = 1 << 4

	pciCapIDVendor = 0x09
	pciCapIDMSIX   = 0x11
)

// Virtio PCI capability types (cfg_type, VIRTIO 1.2 §4.1.4).
const (
	capCommon       = 1
	capNotify       = 2
	capISR          = 3
	capDevice       = 4
	capPCIAccess    = 5
	capSharedMemory = 8
)

// ErrBadConfigSpace: the PCI configuration space is not that of a modern
// virtio device we can drive (wrapped with the reason).
var ErrBadConfigSpace = errors.New("virtiopci: unusable PCI config space")

// Window is a structure of the device in one of its memory BARs.
type Window struct {
	BAR    uint8
	Offset uint64
	Length uint64
}

func (w Window) String() string { return fmt.Sprintf("BAR%d [%#x, +%#x)", w.BAR, w.Offset, w.Length) }

// ShmRegion is a virtio shared memory region (cfg_type 8) with its shmid.
type ShmRegion struct {
	ID uint8
	Window
}

// Layout is what the PCI config space says about a modern virtio device:
// its ids and where its virtio structures live.
type Layout struct {
	Vendor, Device uint16
	Common         Window
	Notify         Window
	// NotifyMultiplier: a queue's notify address is Notify.Offset +
	// queue_notify_off * NotifyMultiplier.
	NotifyMultiplier uint32
	ISR              Window
	// DeviceCfg is the device-specific config space (Length 0: none).
	DeviceCfg Window
	Shm       []ShmRegion
	// MSIX: the device has an MSI-X capability (unused over uio, which
	// gives INTx only).
	MSIX bool
}

// ShmRegion returns the shared memory region with shmid id.
func (l Layout) ShmRegion(id uint8) (ShmRegion, bool) {
	for _, r := range l.Shm {
		if r.ID == id {
			return r, true
		}
	}
	return ShmRegion{}, false
}

// maxCaps bounds the capability walk: 48 four-byte-aligned entries fit
// in the 192 bytes after the header, so more means a loop.
const maxCaps = 48

// ParseLayout decodes a PCI configuration space (the first 256 bytes at
// least, as /sys/bus/pci/devices/*/config gives it) into a Layout. The
// bytes come from the device and are checked: the capability list must
// stay inside the standard config space and end, every virtio capability
// must be long enough for its type and name a BAR, and the common,
// notify, ISR and device structures must all be there. Of several
// capabilities of one type the first is used (the spec's advice); shared
// memory regions are kept by id, first one wins.
func ParseLayout(b []byte) (Layout, error) {
	var l Layout
	if len(b) < 256 {
		return l, fmt.Errorf("%d bytes of config space, want 256: %w", len(b), ErrBadConfigSpace)
	}
	le := binary.LittleEndian
	l.Vendor = le.Uint16(b[pciVendorID:])
	l.Device = le.Uint16(b[pciDeviceID:])
	if le.Uint16(b[pciStatus:])&pciStatusCapList == 0 {
		return l, fmt.Errorf("no capability list: %w", ErrBadConfigSpace)
	}
	var seen [capSharedMemory + 1]bool
	visited := 0
	for p := int(b[pciCapPointer]) &^ 3; p != 0; p = int(b[p+1]) &^ 3 {
		if p < pciHeaderLen || p > 256-4 {
			return l, fmt.Errorf("capability at %#x, outside [%#x, 0xfc]: %w", p, pciHeaderLen, ErrBadConfigSpace)
		}
		if visited++; visited > maxCaps {
			return l, fmt.Errorf("more than %d capabilities (a loop): %w", maxCaps, ErrBadConfigSpace)
		}
		switch b[p] {
		case pciCapIDMSIX:
			l.MSIX = true
			continue
		case pciCapIDVendor:
		default:
			continue
		}
		c, err := parseVirtioCap(b, p)
		if err != nil {
			return l, err
		}
		if c.typ < capCommon || c.typ > capSharedMemory || seen[c.typ] && c.typ != capSharedMemory {
			continue
		}
		switch c.typ {
		case capCommon:
			l.Common = c.w
		case capNotify:
			l.Notify, l.NotifyMultiplier = c.w, c.mult
		case capISR:
			l.ISR = c.w
		case capDevice:
			l.DeviceCfg = c.w
		case capSharedMemory:
			if _, dup := l.ShmRegion(c.id); !dup {
				l.Shm = append(l.Shm, ShmRegion{ID: c.id, Window: c.w})
			}
		default:
			continue // PCI access capability, vendor data, future types
		}
		seen[c.typ] = true
	}
	for _, need := range []struct {
		typ  int
		name string
		w    Window
		min  uint64
	}{
		{capCommon, "common", l.Common, commonCfgLen},
		{capNotify, "notify", l.Notify, 2},
		{capISR, "ISR", l.ISR, 1},
		{capDevice, "device", l.DeviceCfg, 1},
	} {
		if !seen[need.typ] {
			return l, fmt.Errorf("no %s config capability: %w", need.name, ErrBadConfigSpace)
		}
		if need.w.Length < need.min {
			return l, fmt.Errorf("%s config of %d bytes, want at least %d: %w", need.name, need.w.Length, need.min, ErrBadConfigSpace)
		}
	}
	return l, nil
}

type virtioCap struct {
	typ  int
	id   uint8
	w    Window
	mult uint32
}

// parseVirtioCap decodes the vendor capability at p (struct
// virtio_pci_cap and its notify and 64-bit extensions).
func parseVirtioCap(b []byte, p int) (virtioCap, error) {
	le := binary.LittleEndian
	n := int(b[p+2]) // cap_len
	typ := int(b[p+3])
	if n < 16 || p+n > 256 {
		// Too short to be a virtio capability; only ours may be refused.
		if typ >= capCommon && typ <= capSharedMemory && n >= 4 {
			return virtioCap{}, fmt.Errorf("virtio capability type %d at %#x of %d bytes: %w", typ, p, n, ErrBadConfigSpace)
		}
		return virtioCap{typ: -1}, nil
	}
	c := virtioCap{typ: typ, id: b[p+5], w: Window{
		BAR:    b[p+4],
		Offset: uint64(le.Uint32(b[p+8:])),
		Length: uint64(le.Uint32(b[p+12:])),
	}}
	switch typ {
	case capNotify:
		if n < 20 {
			return c, fmt.Errorf("notify capability of %d bytes: %w", n, ErrBadConfigSpace)
		}
		c.mult = le.Uint32(b[p+16:])
	case capSharedMemory:
		if n < 24 {
			return c, fmt.Errorf("shared memory capability of %d bytes: %w", n, ErrBadConfigSpace)
		}
		c.w.Offset |= uint64(le.Uint32(b[p+16:])) << 32
		c.w.Length |= uint64(le.Uint32(b[p+20:])) << 32
	case capCommon, capISR, capDevice:
	default:
		return c, nil // not a structure we map: its BAR is not checked
	}
	if c.w.BAR > 5 {
		return c, fmt.Errorf("virtio capability type %d names BAR %d: %w", typ, c.w.BAR, ErrBadConfigSpace)
	}
	if c.w.Offset+c.w.Length < c.w.Offset {
		return c, fmt.Errorf("virtio capability type %d: %v wraps: %w", typ, c.w, ErrBadConfigSpace)
	}
	return c, nil
}

// CheckBARs checks every window against the sizes of the BARs (as the
// resource files give them; 0 for an absent or I/O BAR).
func (l Layout) CheckBARs(sizes [6]uint64) error {
	ws := []struct {
		name string
		w    Window
	}{{"common", l.Common}, {"notify", l.Notify}, {"ISR", l.ISR}, {"device", l.DeviceCfg}}
	for _, r := range l.Shm {
		ws = append(ws, struct {
			name string
			w    Window
		}{fmt.Sprintf("shared memory %d", r.ID), r.Window})
	}
	for _, x := range ws {
		if x.w.Offset+x.w.Length > sizes[x.w.BAR] {
			return fmt.Errorf("%s config %v beyond the %#x-byte BAR: %w", x.name, x.w, sizes[x.w.BAR], ErrBadConfigSpace)
		}
	}
	return nil
}
