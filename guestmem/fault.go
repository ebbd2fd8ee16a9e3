package guestmem

import (
	"errors"
	"runtime"
)

// FaultAddr reports whether r, a value recovered from a panic, is a
// memory fault that debug.SetPanicOnFault turned into a panic (guest
// memory whose file the front-end truncated under us), and the faulting
// address. Such panics are runtime errors carrying the address; any
// other panic is a bug and should be raised again.
func FaultAddr(r any) (uintptr, bool) {
	re, ok := r.(runtime.Error)
	if !ok {
		return 0, false
	}
	var f interface{ Addr() uintptr }
	if !errors.As(re, &f) {
		return 0, false
	}
	return f.Addr(), true
}

// IsFault reports whether r is a memory fault (see FaultAddr).
func IsFault(r any) bool {
	_, ok := FaultAddr(r)
	return ok
}
