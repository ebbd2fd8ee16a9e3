package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vstellar/vstellar/virtio/abi"
)

// RemoteError is an error the guest's agent answered a call with. When
// the device refused a command, Status is its status and the error
// unwraps to it: errors.Is(err, abi.StatusBadAddress).
type RemoteError struct {
	Guest  string // Client.Name
	Method string
	// Msg is the guest's message, as it wrote it.
	Msg    string
	Status abi.Status
}

func (e *RemoteError) Error() string {
	g := ""
	if e.Guest != "" {
		g = " " + e.Guest
	}
	return "agent" + g + ": " + e.Method + ": guest says: " + e.Msg
}

// Unwrap returns the device's status, if any.
func (e *RemoteError) Unwrap() error {
	if e.Status == abi.StatusOK {
		return nil
	}
	return e.Status
}

// JSON-RPC carries an error as a string only, so the device's status
// rides at its end in this form and the Client takes it back out.
const statusTag = " [device status "

// wireError is err as the Service returns it: its message, with the
// device's status appended when there is one.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var se *abi.StatusError
	if errors.As(err, &se) {
		return fmt.Errorf("%w%s%d]", err, statusTag, uint32(se.Status))
	}
	return err
}

// remoteError parses what wireError wrote.
func remoteError(guest, method, msg string) *RemoteError {
	e := &RemoteError{Guest: guest, Method: method, Msg: msg}
	i := strings.LastIndex(msg, statusTag)
	if i < 0 || !strings.HasSuffix(msg, "]") {
		return e
	}
	n, err := strconv.ParseUint(msg[i+len(statusTag):len(msg)-1], 10, 32)
	if err != nil || n == 0 {
		return e
	}
	e.Msg, e.Status = msg[:i], abi.Status(n)
	return e
}
