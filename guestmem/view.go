package guestmem

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrOutOfRange is returned (wrapped) when an address or length does not
// fall inside mapped guest memory.
var ErrOutOfRange = errors.New("outside guest memory")

// View is a bounds-checked window onto mapped guest memory. The zero View is
// empty. Views are values: copy them freely, but do not use one after the
// Mapping behind it is unmapped.
type View struct {
	b []byte
}

// Len is the number of bytes in the view.
func (v View) Len() uint64 { return uint64(len(v.b)) }

// Sub returns the n bytes at off, or an error wrapping ErrOutOfRange when
// they do not fit. off and n may be hostile.
func (v View) Sub(off, n uint64) (View, error) {
	end, ok := addNoOverflow(off, n)
	if !ok || end > uint64(len(v.b)) {
		return View{}, fmt.Errorf("range [%#x, +%#x) of a %#x-byte view: %w", off, n, len(v.b), ErrOutOfRange)
	}
	return View{b: v.b[off:end:end]}, nil
}

// Bytes exposes the view as a byte slice for bulk copies. The slice aliases
// guest memory, which the guest may change at any time: copy what you must
// validate before validating it.
func (v View) Bytes() []byte {
	v.checkGuarded()
	return v.b
}

// Uint16 reads a little-endian uint16 at off with no ordering.
func (v View) Uint16(off uint64) uint16 {
	v.checkGuarded()
	return binary.LittleEndian.Uint16(v.b[off:])
}

// Uint32 reads a little-endian uint32 at off with no ordering.
func (v View) Uint32(off uint64) uint32 {
	v.checkGuarded()
	return binary.LittleEndian.Uint32(v.b[off:])
}

// Uint64 reads a little-endian uint64 at off with no ordering.
func (v View) Uint64(off uint64) uint64 {
	v.checkGuarded()
	return binary.LittleEndian.Uint64(v.b[off:])
}

// PutUint16 writes a little-endian uint16 at off with no ordering.
func (v View) PutUint16(off uint64, x uint16) {
	v.checkGuarded()
	binary.LittleEndian.PutUint16(v.b[off:], x)
}

// PutUint32 writes a little-endian uint32 at off with no ordering.
func (v View) PutUint32(off uint64, x uint32) {
	v.checkGuarded()
	binary.LittleEndian.PutUint32(v.b[off:], x)
}

// PutUint64 writes a little-endian uint64 at off with no ordering.
func (v View) PutUint64(off uint64, x uint64) {
	v.checkGuarded()
	binary.LittleEndian.PutUint64(v.b[off:], x)
}

// CopyOut copies from the view at off into dst and returns the bytes copied.
func (v View) CopyOut(dst []byte, off uint64) int {
	v.checkGuarded()
	return copy(dst, v.b[off:])
}

// CopyIn copies src into the view at off and returns the bytes copied.
func (v View) CopyIn(off uint64, src []byte) int {
	v.checkGuarded()
	return copy(v.b[off:], src)
}

// ViewsLen is the total length of vs, one buffer in pieces.
func ViewsLen(vs []View) uint64 {
	var n uint64
	for _, v := range vs {
		n += v.Len()
	}
	return n
}
