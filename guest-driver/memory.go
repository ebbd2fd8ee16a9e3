package guestdriver

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
)

// Buffer is guest DMA memory: a guest-physically contiguous range at GPA
// and the guest's view of its bytes. Rings, event records and the memory
// behind MRs are Buffers.
type Buffer struct {
	GPA  uint64
	View guestmem.View
}

// Len is the buffer's size in bytes.
func (b Buffer) Len() uint64 { return b.View.Len() }

// Bytes is the buffer's memory. The device may read or write it at any
// time it is registered or posted.
func (b Buffer) Bytes() []byte { return b.View.Bytes() }

// Slice returns the n bytes at off.
func (b Buffer) Slice(off, n uint64) (Buffer, error) {
	v, err := b.View.Sub(off, n)
	if err != nil {
		return Buffer{}, fmt.Errorf("guestdriver: buffer slice: %w", err)
	}
	return Buffer{GPA: b.GPA + off, View: v}, nil
}

// dmaPool hands out guest DMA memory from a Transport and recycles what
// the driver frees (rings of destroyed CQs and QPs, page lists), because
// transports need not be able to free (the simulated VM's allocator
// cannot). Sizes are rounded up to a power of two of at least 64 bytes,
// and a block is aligned to its size up to a page, so a freed block fits
// any later request of its class whose alignment it satisfies.
type dmaPool struct {
	t    Transport
	mu   sync.Mutex
	free map[uint][]Buffer // class (log2 size) -> free whole blocks
	live map[uint64]Buffer // GPA -> whole block handed out
}

const (
	minClassShift = 6 // one cache line
	pageShift     = 12
)

func newDMAPool(t Transport) *dmaPool {
	return &dmaPool{t: t, free: map[uint][]Buffer{}, live: map[uint64]Buffer{}}
}

func sizeClass(size uint64) uint {
	if size <= 1<<minClassShift {
		return minClassShift
	}
	return uint(bits.Len64(size - 1))
}

// alloc returns size bytes aligned to align (a power of two), zeroed.
func (p *dmaPool) alloc(size, align uint64) (Buffer, error) {
	if size == 0 || size > 1<<40 {
		return Buffer{}, fmt.Errorf("guestdriver: dma allocation of %d bytes", size)
	}
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 {
		return Buffer{}, fmt.Errorf("guestdriver: alignment %d is not a power of two", align)
	}
	class := sizeClass(size)
	align = max(align, uint64(1)<<min(class, pageShift))
	p.mu.Lock()
	defer p.mu.Unlock()
	var whole Buffer
	blocks := p.free[class]
	for i, b := range blocks {
		if b.GPA%align == 0 {
			blocks[i] = blocks[len(blocks)-1]
			p.free[class] = blocks[:len(blocks)-1]
			clear(b.Bytes()) // fresh transport memory is zero; recycled must be too
			whole = b
			break
		}
	}
	if whole.Len() == 0 {
		b, err := p.t.AllocDMA(1<<class, align)
		if err != nil {
			return Buffer{}, err
		}
		if b.Len() < 1<<class || b.GPA%align != 0 {
			return Buffer{}, fmt.Errorf("guestdriver: transport gave %d bytes at %#x for %d aligned to %d",
				b.Len(), b.GPA, uint64(1)<<class, align)
		}
		whole = b
	}
	p.live[whole.GPA] = whole
	return whole.Slice(0, size)
}

// release returns a buffer from alloc for reuse. The device must no
// longer use it. Anything else (a slice, a second release) is ignored.
func (p *dmaPool) release(b Buffer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	whole, ok := p.live[b.GPA]
	if !ok || b.Len() == 0 || sizeClass(b.Len()) != sizeClass(whole.Len()) {
		return
	}
	delete(p.live, b.GPA)
	class := sizeClass(whole.Len())
	p.free[class] = append(p.free[class], whole)
}
