package guestmem

import (
	"fmt"
	"runtime/debug"
)

// FaultError is the error Guard returns when guest memory faulted under
// fn: the front-end shrank the file behind a mapping, so the page is gone.
type FaultError struct {
	Addr uintptr // the faulting address
}

func (e *FaultError) Error() string { return fmt.Sprintf("guest memory fault at %#x", e.Addr) }

// Guard runs fn on the calling goroutine with memory faults turned into a
// *FaultError, so that a front-end that truncates its memory file costs
// the device that touched it, not the daemon. It is the only place that
// turns faults into panics (a repository test checks that no other code
// calls debug.SetPanicOnFault), and in race builds every access to a
// front-end's mapping checks that it runs inside Guard (see checkGuarded):
// together these make every touch of guest memory fault-safe by
// construction.
//
// fn must leave nothing half-done that matters when cut short at any
// access to guest memory: locks it takes are released by defer. Panics
// other than memory faults are bugs and propagate.
func Guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			addr, ok := FaultAddr(r)
			if !ok {
				panic(r)
			}
			err = &FaultError{Addr: addr}
		}
	}()
	return fn()
}
