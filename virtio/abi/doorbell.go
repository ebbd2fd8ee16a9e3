package abi

import "fmt"

// The doorbell region is shared memory region DoorbellShmID of the device:
// a memfd the device maps into the guest with SHMEM_MAP, separate from guest
// RAM, so doorbells never sit in memory that PVDMA pins or that the guest
// could reuse for DMA buffers (the stale-2-MiB-pin hazard of Stellar's first
// design). Its layout:
//
//	[0, RecordsOffset)                      device page: engine state the
//	                                        device writes and the driver
//	                                        reads (the idle flag of the
//	                                        wake-up protocol)
//	[RecordsOffset, +Records*RecordSize)    doorbell records, one per QP,
//	                                        CQ and SRQ, handed out by
//	                                        CREATE_QP, CREATE_CQ and
//	                                        CREATE_SRQ by index
//	rest up to Pages*PageSize               unused, zero
//
// Pages is a power of two: QEMU puts the shared memory regions in a PCI BAR
// of the region's size, and a BAR's size must be a power of two (QEMU
// 11.1 asserts in pci_register_bar otherwise).
//
// Each record has a cache line of its own so that the guest ringing one
// QP's doorbell does not bounce the line the engine polls for another.
const (
	DoorbellShmID      = 0
	DoorbellRecordSize = 64
	// DoorbellMinPageSize is the smallest doorbell page. Region pages are
	// the host page size if larger, so that the region is mappable.
	DoorbellMinPageSize = 4096
)

// DoorbellLayout is the geometry of the doorbell region, as config space
// advertises it.
type DoorbellLayout struct {
	ShmID         uint8  // shared memory region id (always DoorbellShmID in v1)
	RecordSize    uint16 // bytes per doorbell record
	PageSize      uint32 // region page size; the region is Pages*PageSize bytes
	Pages         uint32 // region size in pages
	RecordsOffset uint32 // offset of record 0 (after the device page)
	Records       uint32 // number of records
}

// NewDoorbellLayout sizes the region for limits: one record per QP, CQ
// and SRQ after one device page. hostPageSize is the host's mmap page size
// (a power of two).
func NewDoorbellLayout(l Limits, hostPageSize uint64) (DoorbellLayout, error) {
	if err := l.Validate(); err != nil {
		return DoorbellLayout{}, err
	}
	ps := uint64(DoorbellMinPageSize)
	if hostPageSize > ps {
		ps = hostPageSize
	}
	if ps&(ps-1) != 0 || ps > 1<<30 {
		return DoorbellLayout{}, fmt.Errorf("page size %d: %w", hostPageSize, ErrBadValue)
	}
	records := l.DoorbellRecords() // at most 3 * 2^18: no overflow below
	size := ps + records*DoorbellRecordSize
	pages := pow2Ceil((size + ps - 1) / ps)
	d := DoorbellLayout{
		ShmID:         DoorbellShmID,
		RecordSize:    DoorbellRecordSize,
		PageSize:      uint32(ps),
		Pages:         uint32(pages),
		RecordsOffset: uint32(ps),
		Records:       uint32(records),
	}
	return d, d.Validate()
}

// DoorbellRecords is how many doorbell records the limits need: QPs
// first, then CQs, then SRQs (spec §7.3).
func (l Limits) DoorbellRecords() uint64 {
	return uint64(l.MaxQP) + uint64(l.MaxCQ) + uint64(l.MaxSRQ)
}

func pow2Ceil(n uint64) uint64 {
	p := uint64(1)
	for p < n {
		p <<= 1
	}
	return p
}

// Size is the region's size in bytes.
func (d DoorbellLayout) Size() uint64 { return uint64(d.PageSize) * uint64(d.Pages) }

// Validate checks a layout read from config space: a power-of-two page
// size of at least DoorbellMinPageSize, power-of-two records of at least 8
// bytes, a records array that starts after the device page, and that fits
// in the region.
func (d DoorbellLayout) Validate() error {
	ps, rs := uint64(d.PageSize), uint64(d.RecordSize)
	switch {
	case ps < DoorbellMinPageSize || ps&(ps-1) != 0:
		return fmt.Errorf("doorbell page size %d: %w", ps, ErrBadValue)
	case rs < 8 || rs&(rs-1) != 0 || rs > ps:
		return fmt.Errorf("doorbell record size %d: %w", rs, ErrBadValue)
	case d.Pages == 0 || d.Pages&(d.Pages-1) != 0:
		return fmt.Errorf("doorbell region of %d pages (not a power of two): %w", d.Pages, ErrBadValue)
	case uint64(d.RecordsOffset) < ps || uint64(d.RecordsOffset)%rs != 0:
		return fmt.Errorf("doorbell records offset %d: %w", d.RecordsOffset, ErrBadValue)
	case uint64(d.RecordsOffset)+uint64(d.Records)*rs > d.Size():
		return fmt.Errorf("%d doorbell records of %d bytes at %d overflow a %d-byte region: %w",
			d.Records, rs, d.RecordsOffset, d.Size(), ErrBadValue)
	}
	return nil
}

// RecordOffset is the byte offset of record i in the region; ok is false
// when i is not a record of this layout (i may be hostile).
func (d DoorbellLayout) RecordOffset(i uint32) (off uint64, ok bool) {
	if i >= d.Records {
		return 0, false
	}
	return uint64(d.RecordsOffset) + uint64(i)*uint64(d.RecordSize), true
}

// Device page (offset 0 of the doorbell region), written by the device.
//
//	0x00 le32 engine_flags (EngineIdle)
//	0x04 le32 reserved
//	0x08 le64 wakeups: how many times the engine was woken from idle
const (
	DevPageOffEngineFlags = 0x00
	DevPageOffWakeups     = 0x08
)

// EngineIdle is set in engine_flags while the device's engine sleeps: a
// driver that loads it set after storing a producer index (with a full
// barrier between) kicks QueueWakeup. The wake-up protocol, both sides
// and why no doorbell is lost: docs/spec.md §6.6.
const EngineIdle uint32 = 1 << 0

// QP doorbell record (one per QP, RecordSize bytes at RecordOffset(i)).
// The driver owns the producer indices, the device the consumer indices;
// all are free-running 32-bit counters (index = counter mod ring size).
//
//	0x00 le32 sq_prod  driver: send WQEs posted
//	0x04 le32 rq_prod  driver: receive WQEs posted
//	0x08 le32 sq_cons  device: send WQEs retired (slots free for reuse)
//	0x0c le32 rq_cons  device: receive WQEs consumed
const (
	QPDoorbellOffSQProd = 0x00
	QPDoorbellOffRQProd = 0x04
	QPDoorbellOffSQCons = 0x08
	QPDoorbellOffRQCons = 0x0c
)

// CQ doorbell record (one per CQ).
//
//	0x00 le32 prod     device: CQEs written; a CQE is visible once prod
//	                   passes it (the device stores prod after the CQE)
//	0x04 le32 cons     driver: CQEs consumed; the device never overwrites
//	                   an unconsumed CQE (that is an overflow: EventCQErr)
//	0x08 le32 arm      driver: arm_sn<<2 | CQArm* flags; writing a new
//	                   arm_sn arms the CQ for one event
//	0x0c le32 arm_ack  device: the last arm_sn that produced an event
const (
	CQDoorbellOffProd   = 0x00
	CQDoorbellOffCons   = 0x04
	CQDoorbellOffArm    = 0x08
	CQDoorbellOffArmAck = 0x0c
)

// SRQ doorbell record (one per SRQ, ABI 1.1).
//
//	0x00 le32 prod  driver: receive WQEs posted
//	0x04 le32 cons  device: WQEs taken; the device copied each before it
//	                stored cons, so their slots may be reused at once
const (
	SRQDoorbellOffProd = 0x00
	SRQDoorbellOffCons = 0x04
)

// CQArmWord encodes the arm word for sequence number sn and flags.
func CQArmWord(sn uint32, flags uint32) uint32 { return sn<<2 | flags&cqArmFlags }

// SplitCQArmWord splits an arm word into sequence number and flags.
func SplitCQArmWord(w uint32) (sn, flags uint32) { return w >> 2, w & cqArmFlags }
