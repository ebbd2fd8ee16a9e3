//go:build amd64 || arm64 || riscv64 || ppc64le || loong64 || mips64le || mipsle || 386 || arm || wasm

package guestmem

import (
	"fmt"
	"unsafe"
)

// MMIO accessors, for a View over a mapped device BAR (a guest-side driver
// mapping /sys/bus/pci/devices/*/resourceN). Device registers need exactly
// one access of exactly the register's width: a wider access or a
// read-modify-write touches the neighbouring register, whose reads may
// have side effects (virtio's ISR clears on read). The ordered accessors
// in atomic.go do not fit: the 16-bit store is a 32-bit compare-and-swap
// and there is no 8-bit one. Each accessor here is a function of its own
// that is never inlined, so the compiler can neither drop nor merge nor
// widen the access (Go has no volatile); norace keeps the race detector
// from instrumenting device memory. Offsets must be aligned to the width.
// Device registers are little-endian, as is every host this file builds on.

// MMIORead8 reads the byte register at off.
func (v View) MMIORead8(off uint64) uint8 { return mmioLoad8((*uint8)(v.mmioPtr(off, 1))) }

// MMIORead16 reads the 16-bit little-endian register at off.
func (v View) MMIORead16(off uint64) uint16 { return mmioLoad16((*uint16)(v.mmioPtr(off, 2))) }

// MMIORead32 reads the 32-bit little-endian register at off.
func (v View) MMIORead32(off uint64) uint32 { return mmioLoad32((*uint32)(v.mmioPtr(off, 4))) }

// MMIOWrite8 writes the byte register at off.
func (v View) MMIOWrite8(off uint64, x uint8) { mmioStore8((*uint8)(v.mmioPtr(off, 1)), x) }

// MMIOWrite16 writes the 16-bit little-endian register at off.
func (v View) MMIOWrite16(off uint64, x uint16) { mmioStore16((*uint16)(v.mmioPtr(off, 2)), x) }

// MMIOWrite32 writes the 32-bit little-endian register at off.
func (v View) MMIOWrite32(off uint64, x uint32) { mmioStore32((*uint32)(v.mmioPtr(off, 4)), x) }

// mmioPtr bounds-checks [off, off+n) and returns its address, which must
// be n-aligned in host memory.
func (v View) mmioPtr(off, n uint64) unsafe.Pointer {
	v.checkGuarded()
	end, ok := addNoOverflow(off, n)
	if !ok || end > uint64(len(v.b)) {
		panic(fmt.Sprintf("guestmem: MMIO access [%#x, +%d) of a %#x-byte view", off, n, len(v.b)))
	}
	p := unsafe.Pointer(&v.b[off])
	if uintptr(p)%uintptr(n) != 0 {
		panic(fmt.Sprintf("guestmem: unaligned %d-byte MMIO access at %#x", n, uintptr(p)))
	}
	return p
}

//go:noinline
//go:norace
func mmioLoad8(p *uint8) uint8 { return *p }

//go:noinline
//go:norace
func mmioLoad16(p *uint16) uint16 { return *p }

//go:noinline
//go:norace
func mmioLoad32(p *uint32) uint32 { return *p }

//go:noinline
//go:norace
func mmioStore8(p *uint8, x uint8) { *p = x }

//go:noinline
//go:norace
func mmioStore16(p *uint16, x uint16) { *p = x }

//go:noinline
//go:norace
func mmioStore32(p *uint32, x uint32) { *p = x }
