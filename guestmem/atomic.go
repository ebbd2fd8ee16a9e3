//go:build amd64 || arm64 || riscv64 || ppc64le || loong64 || mips64le || mipsle || 386 || arm || wasm

package guestmem

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The ordered accessors below are the ring-index and doorbell primitives.
// Go's sync/atomic operations are sequentially consistent, so a Load here
// is at least an acquire and a Store at least a release, which is what the
// virtio ring protocol needs between index updates and ring contents.
// Virtio is little-endian; this file only builds on little-endian hosts.

// LoadUint16Acquire atomically reads the 16-bit field at off (which must be
// 2-byte aligned in host memory).
func (v View) LoadUint16Acquire(off uint64) uint16 {
	w, shift := v.word16(off)
	return uint16(atomic.LoadUint32(w) >> shift)
}

// StoreUint16Release atomically writes the 16-bit field at off without
// disturbing its neighbour in the same 32-bit word.
func (v View) StoreUint16Release(off uint64, x uint16) {
	w, shift := v.word16(off)
	mask := uint32(0xffff) << shift
	for {
		old := atomic.LoadUint32(w)
		if atomic.CompareAndSwapUint32(w, old, old&^mask|uint32(x)<<shift) {
			return
		}
	}
}

// LoadUint32Acquire atomically reads the 4-byte-aligned uint32 at off.
func (v View) LoadUint32Acquire(off uint64) uint32 { return atomic.LoadUint32(v.ptr32(off)) }

// StoreUint32Release atomically writes the 4-byte-aligned uint32 at off.
func (v View) StoreUint32Release(off uint64, x uint32) { atomic.StoreUint32(v.ptr32(off), x) }

// LoadUint64Acquire atomically reads the 8-byte-aligned uint64 at off.
func (v View) LoadUint64Acquire(off uint64) uint64 { return atomic.LoadUint64(v.ptr64(off)) }

// StoreUint64Release atomically writes the 8-byte-aligned uint64 at off.
func (v View) StoreUint64Release(off uint64, x uint64) { atomic.StoreUint64(v.ptr64(off), x) }

// AddUint64 atomically adds delta to the 8-byte-aligned uint64 at off and
// returns the old value (RDMA FETCH_ADD semantics).
func (v View) AddUint64(off uint64, delta uint64) (old uint64) {
	return atomic.AddUint64(v.ptr64(off), delta) - delta
}

// CompareAndSwapUint64 atomically replaces the 8-byte-aligned uint64 at off
// with swap if it equals cmp, and returns the value it found (RDMA CMP_SWAP
// semantics).
func (v View) CompareAndSwapUint64(off uint64, cmp, swap uint64) (old uint64) {
	p := v.ptr64(off)
	for {
		cur := atomic.LoadUint64(p)
		if cur != cmp {
			return cur
		}
		if atomic.CompareAndSwapUint64(p, cur, swap) {
			return cur
		}
	}
}

// Aligned reports whether off is aligned to align bytes in host memory.
func (v View) Aligned(off, align uint64) bool {
	if off >= uint64(len(v.b)) {
		return false
	}
	return uintptr(unsafe.Pointer(&v.b[off]))%uintptr(align) == 0
}

// word16 returns the aligned 32-bit word holding the 16-bit field at off and
// the field's bit offset in it. The word may begin before the view or end
// after it; it is still inside the page-aligned mapping.
func (v View) word16(off uint64) (*uint32, uint) {
	v.checkGuarded()
	p := unsafe.Pointer(&v.b[off:][1]) // bounds-check both bytes
	p = unsafe.Add(p, -1)
	a := uintptr(p)
	if a&1 != 0 {
		panic(fmt.Sprintf("guestmem: unaligned 16-bit atomic at %#x", a))
	}
	return (*uint32)(unsafe.Add(p, -int(a&3))), uint(a&3) * 8
}

func (v View) ptr32(off uint64) *uint32 {
	v.checkGuarded()
	p := unsafe.Pointer(&v.b[off:][3])
	p = unsafe.Add(p, -3)
	if uintptr(p)&3 != 0 {
		panic(fmt.Sprintf("guestmem: unaligned 32-bit atomic at %#x", uintptr(p)))
	}
	return (*uint32)(p)
}

func (v View) ptr64(off uint64) *uint64 {
	v.checkGuarded()
	p := unsafe.Pointer(&v.b[off:][7])
	p = unsafe.Add(p, -7)
	if uintptr(p)&7 != 0 {
		panic(fmt.Sprintf("guestmem: unaligned 64-bit atomic at %#x", uintptr(p)))
	}
	return (*uint64)(p)
}
