package remote

import (
	"errors"
	"runtime"
	"runtime/debug"

	"github.com/vstellar/vstellar/guestmem"
)

// viewsLen is the total length of vs.
func viewsLen(vs []guestmem.View) uint64 {
	var n uint64
	for _, v := range vs {
		n += v.Len()
	}
	return n
}

// readViews fills p with the bytes of vs (one buffer in pieces) at off.
// false: the range is not all there, or the memory behind it faulted
// (the guest's memory file was truncated under us).
func readViews(vs []guestmem.View, p []byte, off uint64) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&ok)
	for _, v := range vs {
		if len(p) == 0 {
			break
		}
		if n := v.Len(); off >= n {
			off -= n
			continue
		}
		p = p[v.CopyOut(p, off):]
		off = 0
	}
	return len(p) == 0
}

// writeViews copies p into vs at off; false as for readViews.
func writeViews(vs []guestmem.View, off uint64, p []byte) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&ok)
	for _, v := range vs {
		if len(p) == 0 {
			break
		}
		if n := v.Len(); off >= n {
			off -= n
			continue
		}
		p = p[v.CopyIn(off, p):]
		off = 0
	}
	return len(p) == 0
}

// recoverFault turns a memory fault (a panic carrying the faulting
// address, which debug.SetPanicOnFault makes of a SIGBUS) into ok =
// false. Any other panic is a bug and goes on.
func recoverFault(ok *bool) {
	r := recover()
	if r == nil {
		return
	}
	var addr interface{ Addr() uintptr }
	if re, isRE := r.(runtime.Error); !isRE || !errors.As(re, &addr) {
		panic(r)
	}
	*ok = false
}
