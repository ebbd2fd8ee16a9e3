package twolevel

import (
	"fmt"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// MTT is a device's memory translation table as a host RNIC keeps it: a
// region per key, and in each region one guest physical page frame per
// 4 KiB page of IOVA.
type MTT struct {
	regions []*Region // by key index; slot 0 unused, so key 0 is never valid
}

// Region is one MR in the MTT.
type Region struct {
	Key    emtt.Key
	PD     uint32
	Access abi.Access
	IOVA   uint64
	Length uint64
	// pages[i] is the guest physical page frame of IOVA page
	// IOVA>>PageShift + i.
	pages []uint64
}

// keyTag marks the MTT's keys, so that an emtt key of the same index is
// not taken for one (the model never reuses a slot).
const keyTag = 0xa5

// NewMTT returns an empty MTT.
func NewMTT() *MTT { return &MTT{regions: make([]*Region, 1)} }

// Insert registers an MR over spans of mem (emtt.Spec, as for emtt's
// Insert) and returns its region. Its pages must be whole guest pages:
// the first span starts at the IOVA's offset in its page, every span
// boundary inside the MR is page aligned. It fails like emtt's Insert
// for spans that do not cover Length (ErrRange) or leave guest RAM
// (ErrBadAddress), and with ErrUnaligned.
func (t *MTT) Insert(mem *guestmem.Table, s emtt.Spec) (*Region, error) {
	var total uint64
	for _, sp := range s.Spans {
		if sp.GPA+sp.Len < sp.GPA {
			return nil, fmt.Errorf("span %#x+%#x wraps: %w", sp.GPA, sp.Len, emtt.ErrBadAddress)
		}
		if err := inRAM(mem, sp); err != nil {
			return nil, err
		}
		total += sp.Len
	}
	if total != s.Length || s.IOVA+s.Length < s.IOVA {
		return nil, fmt.Errorf("spans cover %#x bytes of a %#x-byte region: %w", total, s.Length, emtt.ErrRange)
	}
	r := &Region{PD: s.PD, Access: s.Access, IOVA: s.IOVA, Length: s.Length}
	if s.Length > 0 {
		r.pages = make([]uint64, (s.IOVA+s.Length-1)>>PageShift-s.IOVA>>PageShift+1)
	}
	iova := s.IOVA
	for k, sp := range s.Spans {
		if sp.Len == 0 {
			continue
		}
		if iova%PageSize != sp.GPA%PageSize || (k > 0 && iova%PageSize != 0) {
			return nil, fmt.Errorf("span %d (%#x+%#x) at IOVA %#x: %w", k, sp.GPA, sp.Len, iova, ErrUnaligned)
		}
		for gpa, end := sp.GPA, sp.GPA+sp.Len; gpa < end; {
			r.pages[iova>>PageShift-s.IOVA>>PageShift] = gpa >> PageShift
			take := min(PageSize-gpa%PageSize, end-gpa)
			gpa += take
			iova += take
		}
	}
	r.Key = emtt.Key(uint32(len(t.regions))<<8 | keyTag)
	t.regions = append(t.regions, r)
	return r, nil
}

// inRAM checks that sp lies in guest RAM (possibly across regions).
func inRAM(mem *guestmem.Table, sp emtt.Span) error {
	for gpa, end := sp.GPA, sp.GPA+sp.Len; gpa < end; {
		reg, ok := mem.Lookup(gpa)
		if !ok {
			return fmt.Errorf("guest physical %#x: %w", gpa, emtt.ErrBadAddress)
		}
		gpa = min(reg.GuestPhys+reg.Size, end)
	}
	return nil
}

// Lookup returns the region of key k.
func (t *MTT) Lookup(k emtt.Key) (*Region, error) {
	i := k.Index()
	if k.Tag() != keyTag || i == 0 || uint64(i) >= uint64(len(t.regions)) {
		return nil, fmt.Errorf("key %#x: %w", uint32(k), emtt.ErrNoKey)
	}
	return t.regions[i], nil
}

// Len is the number of regions.
func (t *MTT) Len() int { return len(t.regions) - 1 }

// Check verifies that a DMA of n bytes at iova, from protection domain pd,
// needing access, may use the region: emtt.Region.Check without the
// memory-type and invalidation cases the model has no use for.
func (r *Region) Check(pd uint32, need abi.Access, iova, n uint64) error {
	switch {
	case r.PD != pd:
		return fmt.Errorf("key %#x: pd %d, want %d: %w", uint32(r.Key), r.PD, pd, emtt.ErrPD)
	case r.Access&need != need:
		return fmt.Errorf("key %#x: access %#x lacks %#x: %w", uint32(r.Key), uint32(r.Access), uint32(need&^r.Access), emtt.ErrAccess)
	}
	end := iova + n
	if iova < r.IOVA || end < iova || end > r.IOVA+r.Length {
		return fmt.Errorf("key %#x: [%#x, +%#x) outside [%#x, +%#x): %w", uint32(r.Key), iova, n, r.IOVA, r.Length, emtt.ErrRange)
	}
	return nil
}

// gpa is the guest physical address behind iova, which Check accepted.
func (r *Region) gpa(iova uint64) uint64 {
	return r.pages[iova>>PageShift-r.IOVA>>PageShift]<<PageShift | iova%PageSize
}
