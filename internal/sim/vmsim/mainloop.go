package vmsim

import (
	"context"
	"time"
)

// mainLoop is QEMU's main loop and big lock in one. QEMU drives a
// vhost-user device from its main loop (and from vCPUs holding the big
// lock): a device start is one uninterrupted run of requests, each waiting
// for its reply, and the back-end channel is served only when the loop is
// free again. So a back-end request waits while the VMM waits for a reply;
// a back-end that waits for its acknowledgement inside a front-end request
// deadlocks here as it would under QEMU.
type mainLoop chan struct{}

func newMainLoop() mainLoop { return make(mainLoop, 1) }

func (l mainLoop) Lock() { l <- struct{}{} }

func (l mainLoop) Unlock() { <-l }

// lockUnless takes the loop unless stop is closed first.
func (l mainLoop) lockUnless(stop <-chan struct{}) bool {
	select {
	case l <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

// commitTimeout bounds the memory table update that follows a back-end
// request (QEMU's would wait for ever).
const commitTimeout = 10 * time.Second

// serveBackend runs one back-end request on the main loop
// (frontend.Options.MainLoop): the request and its acknowledgement, then,
// as QEMU's memory transaction commits after the acknowledgement, the
// memory table update a new or removed shared memory mapping makes while
// the device runs: ADD_MEM_REG of the shared memory BAR's range (with the
// mapped file), or REM_MEM_REG.
func (vm *VM) serveBackend(stop <-chan struct{}, serve func()) {
	if !vm.loop.lockUnless(stop) {
		return
	}
	defer vm.loop.Unlock()
	serve()
	if !vm.running || vm.fe == nil {
		return // the next start sends the table
	}
	ctx, cancel := context.WithTimeout(vm.base, commitTimeout)
	defer cancel()
	if err := vm.syncMemory(ctx, false); err != nil {
		vm.log.Warn("vmsim: memory table update after a back-end request failed", "err", err)
	}
}
