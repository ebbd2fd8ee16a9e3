package emtt

import (
	"errors"
	"fmt"
)

// MemType says what kind of memory a range is.
type MemType uint8

const (
	// MemGuestRAM is ordinary guest memory: DMA may read and write it.
	MemGuestRAM MemType = 1
	// MemIO is device memory mapped into the guest (doorbells): never
	// pinned, never a DMA target.
	MemIO MemType = 2
	// MemGPU is reserved for GPU memory exposed to the guest.
	MemGPU MemType = 3
)

func (t MemType) String() string {
	switch t {
	case MemGuestRAM:
		return "guest-ram"
	case MemIO:
		return "io"
	case MemGPU:
		return "gpu"
	}
	return fmt.Sprintf("MemType(%d)", uint8(t))
}

// Errors a translation or update returns (wrapped with detail). The engine
// maps them to work-completion statuses, the control path to statuses.
var (
	ErrNoKey       = errors.New("emtt: no region with this key")
	ErrPD          = errors.New("emtt: region belongs to another protection domain")
	ErrAccess      = errors.New("emtt: access not granted by the region")
	ErrRange       = errors.New("emtt: range outside the region")
	ErrIOMemory    = errors.New("emtt: IO memory is not a DMA target")
	ErrInvalidated = errors.New("emtt: region's guest memory was removed")
	ErrFull        = errors.New("emtt: table full")
	ErrBadAddress  = errors.New("emtt: range outside guest RAM or in IO memory")
	ErrPin         = errors.New("emtt: memory could not be pinned for DMA")
)

// Key is a memory key (lkey and rkey are the same key).
type Key uint32

// Index is the slot the key names.
func (k Key) Index() uint32 { return uint32(k) >> 8 }

// Tag is the key's reuse tag.
func (k Key) Tag() uint8 { return uint8(k) }

// Span is a guest-physically contiguous range.
type Span struct {
	GPA uint64
	Len uint64
}
