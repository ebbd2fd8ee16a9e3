package twolevel

import (
	"fmt"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// NIC is one host RNIC: its virtual devices, the ATC they share and the
// host physical address space their domains map into.
type NIC struct {
	atc  *ATC
	host *HostMemory
	devs []*Device
	st   Stats
	// scratch holds Translate's pages between calls, so that it does
	// not allocate.
	scratch []uint64
}

// Device is one virtual device (a VF given to a VM): its MTT and its
// IOMMU domain. Its id tags its ATC entries (the requester ID or PASID
// an ATS request carries).
type Device struct {
	id  uint32
	mem *guestmem.Table
	mtt *MTT
	dom *Domain
}

// Stats counts a NIC's translations.
type Stats struct {
	Translations uint64 // Translate calls that passed the MTT checks
	Pages        uint64 // 4 KiB pages translated through the ATC
	Faults       uint64 // IOMMU faults
}

// NewNIC returns a NIC with no devices and an ATC of atcEntries entries
// (DefaultATCEntries if 0 or less).
func NewNIC(atcEntries int) *NIC {
	return &NIC{atc: NewATC(atcEntries), host: NewHostMemory()}
}

// AddDevice adds a device whose guest RAM is mem, with an empty MTT and a
// domain mapping all of mem.
func (n *NIC) AddDevice(mem *guestmem.Table) (*Device, error) {
	if len(n.devs) >= MaxDevices {
		return nil, fmt.Errorf("twolevel: more than %d devices", MaxDevices)
	}
	dom, err := NewDomain(mem, n.host)
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", len(n.devs), err)
	}
	d := &Device{id: uint32(len(n.devs)), mem: mem, mtt: NewMTT(), dom: dom}
	n.devs = append(n.devs, d)
	return d, nil
}

// ID is the device's number on the NIC.
func (d *Device) ID() uint32 { return d.id }

// MTT is the device's memory translation table.
func (d *Device) MTT() *MTT { return d.mtt }

// Domain is the device's IOMMU domain.
func (d *Device) Domain() *Domain { return d.dom }

// Register inserts an MR into the device's MTT (see MTT.Insert).
func (d *Device) Register(s emtt.Spec) (*Region, error) { return d.mtt.Insert(d.mem, s) }

// Host is the NIC's host physical address space.
func (n *NIC) Host() *HostMemory { return n.host }

// ATC is the NIC's shared address translation cache.
func (n *NIC) ATC() *ATC { return n.atc }

// Stats returns the NIC's counters.
func (n *NIC) Stats() Stats { return n.st }

// Translate checks a DMA of size bytes at iova through key k of device d
// and translates every 4 KiB page it touches, MTT then ATC (walking d's
// domain on a miss). It returns the host physical address of the first
// byte (0 for an empty DMA). Errors are emtt's for the key checks, ErrFault
// for the IOMMU.
func (n *NIC) Translate(d *Device, k emtt.Key, pd uint32, need abi.Access, iova, size uint64) (uint64, error) {
	var err error
	n.scratch, err = n.TranslatePages(n.scratch[:0], d, k, pd, need, iova, size)
	if err != nil || len(n.scratch) == 0 {
		return 0, err
	}
	return n.scratch[0], nil
}

// dmaWrites is the access that means the DMA writes guest memory: the
// IOMMU must grant write.
const dmaWrites = abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteAtomic

// TranslatePages is Translate that appends to dst the host physical
// address of every piece of the DMA: the first byte, then the start of
// each further page.
func (n *NIC) TranslatePages(dst []uint64, d *Device, k emtt.Key, pd uint32, need abi.Access, iova, size uint64) ([]uint64, error) {
	r, err := d.mtt.Lookup(k)
	if err == nil {
		err = r.Check(pd, need, iova, size)
	}
	if err != nil {
		return dst, err
	}
	n.st.Translations++
	write := need&dmaWrites != 0
	for va, end := iova, iova+size; va < end; va = (va | (PageSize - 1)) + 1 {
		gpa := r.gpa(va)
		pte, ok := n.atc.lookup(d.id, gpa>>PageShift)
		if !ok {
			if pte, err = d.dom.walk(gpa); err != nil {
				n.st.Faults++
				return dst, fmt.Errorf("device %d key %#x IOVA %#x: %w", d.id, uint32(k), va, err)
			}
			n.atc.insert(d.id, gpa>>PageShift, pte)
		}
		if write && pte&pteWrite == 0 {
			n.st.Faults++
			return dst, fmt.Errorf("device %d key %#x IOVA %#x: write to read-only guest physical %#x: %w", d.id, uint32(k), va, gpa, ErrFault)
		}
		n.st.Pages++
		dst = append(dst, pte&pteAddrMask|gpa%PageSize)
	}
	return dst, nil
}
