package hotplug

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalid marks a Spec, Memory or argument that was refused before
	// anything was sent to QEMU.
	ErrInvalid = errors.New("invalid")
	// ErrProtocol marks a peer that does not speak QMP as QEMU does: a
	// bad greeting, a reply that is not QMP, a reply out of step with
	// its command.
	ErrProtocol = errors.New("QMP protocol error")
	// ErrClosed marks a Client whose connection is gone: closed by
	// Close, lost, or closed after a timeout or protocol error (a reply
	// that arrives late would otherwise be taken as the next command's).
	ErrClosed = errors.New("QMP connection closed")
)

// QMPError is an error reply from QEMU: its class (GenericError,
// CommandNotFound, DeviceNotFound...) and description, as QEMU sent them.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("QEMU refused %s: %s: %s", e.Command, e.Class, e.Desc)
}

// StepError is a failed Attach or Detach: the step that failed, QEMU's
// error, and what was done to leave QEMU as it was.
type StepError struct {
	Op   string // "attach" or "detach"
	ID   string // the device's qdev id
	Step string // the QMP command or event that failed, e.g. "device_add"
	Err  error
	// Hint explains a known cause, e.g. a QEMU too old for the driver.
	Hint string
	// RolledBack lists the undo commands that succeeded, in order.
	RolledBack []string
	// RollbackErr is set when undoing failed: QEMU may hold what
	// RolledBack does not list.
	RollbackErr error
}

func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s: %v", e.Op, e.ID, e.Step, e.Err)
	if e.Hint != "" {
		fmt.Fprintf(&b, " (%s)", e.Hint)
	}
	if len(e.RolledBack) > 0 {
		fmt.Fprintf(&b, "; rolled back: %s", strings.Join(e.RolledBack, ", "))
	}
	if e.RollbackErr != nil {
		fmt.Fprintf(&b, "; ROLLBACK FAILED: %v", e.RollbackErr)
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As both the step's and the
// rollback's error.
func (e *StepError) Unwrap() []error {
	if e.RollbackErr != nil {
		return []error{e.Err, e.RollbackErr}
	}
	return []error{e.Err}
}

// qmpClass reports QEMU's error class if err holds a QMPError.
func qmpClass(err error) string {
	var qe *QMPError
	if errors.As(err, &qe) {
		return qe.Class
	}
	return ""
}
