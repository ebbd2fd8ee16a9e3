//go:build race

package guestmem

import (
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"
)

// checked holds the address ranges of the mappings Map created: files a
// front-end owns and may shrink under us. It is test instrumentation
// (race builds only), hence process-wide.
var checked struct {
	sync.RWMutex
	ranges [][2]uintptr // [start, end), sorted by start
}

func registerChecked(m *Mapping) {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m.mem)))
	checked.Lock()
	defer checked.Unlock()
	i, _ := slices.BinarySearchFunc(checked.ranges, lo, func(r [2]uintptr, a uintptr) int { return cmpAddr(r[0], a) })
	checked.ranges = slices.Insert(checked.ranges, i, [2]uintptr{lo, lo + uintptr(len(m.mem))})
}

func unregisterChecked(m *Mapping) {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m.mem)))
	checked.Lock()
	defer checked.Unlock()
	if i, ok := slices.BinarySearchFunc(checked.ranges, lo, func(r [2]uintptr, a uintptr) int { return cmpAddr(r[0], a) }); ok {
		checked.ranges = slices.Delete(checked.ranges, i, i+1)
	}
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkGuarded panics when v lies in a front-end's mapping and the
// calling goroutine is not inside Guard: such an access would crash the
// daemon if the front-end had shrunk the file.
func (v View) checkGuarded() {
	if len(v.b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v.b)))
	checked.RLock()
	i, found := slices.BinarySearchFunc(checked.ranges, p, func(r [2]uintptr, a uintptr) int { return cmpAddr(r[0], a) })
	in := found || (i > 0 && p < checked.ranges[i-1][1])
	checked.RUnlock()
	if !in {
		return
	}
	if on := debug.SetPanicOnFault(true); !on {
		debug.SetPanicOnFault(false)
		panic("guestmem: guest memory touched outside guestmem.Guard")
	}
}
