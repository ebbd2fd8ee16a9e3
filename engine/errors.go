package engine

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// statusErr returns an error that reads as "engine: <detail>" and wraps st,
// so that abi.StatusFor gives the status the control path answers with.
func statusErr(st abi.Status, format string, args ...any) error {
	return fmt.Errorf("engine: %s: %w", fmt.Sprintf(format, args...), st)
}

// wrapStatus wraps a lower-level error (an abi decoding or state-machine
// error) together with the status it maps to, keeping both in the chain.
func wrapStatus(err error, format string, args ...any) error {
	return fmt.Errorf("engine: %s: %w: %w", fmt.Sprintf(format, args...), err, abi.StatusFor(err))
}

// touchGuest runs fn, which touches guest memory (the doorbell region,
// rings) from a control-path goroutine, with a memory fault turned into
// an error wrapping abi.StatusBadAddress instead of a crash of the whole
// daemon: a front-end may truncate the memory file under us at any time.
// fn must leave nothing half-done that matters when it is cut short
// (locks it takes are unlocked by defer).
func touchGuest(what string, fn func()) error {
	if err := guestmem.Guard(func() error { fn(); return nil }); err != nil {
		return statusErr(abi.StatusBadAddress, "%s: %v", what, err)
	}
	return nil
}
