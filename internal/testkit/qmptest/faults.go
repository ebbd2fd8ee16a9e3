package qmptest

import "maps"

// Faults make the server misbehave. The zero value is a well-behaved
// server.
type Faults struct {
	// Greeting, if set, is sent as the first line instead of the QMP
	// greeting.
	Greeting string
	// NoGreeting sends nothing on connect.
	NoGreeting bool
	// EventBeforeCapabilities is how many of the next connections get
	// an event just before the reply to qmp_capabilities, which go-qemu
	// takes for the reply (its PR #210).
	EventBeforeCapabilities int
	// Commands are faults by command name.
	Commands map[string]Fault
	// NoDeviceDeleted: device_del is accepted but the guest never lets
	// the device go, so DEVICE_DELETED never comes (a later device_del
	// without this fault completes it).
	NoDeviceDeleted bool
}

func (f Faults) clone() Faults {
	f.Commands = maps.Clone(f.Commands)
	return f
}

// FaultKind is how a command's reply goes wrong.
type FaultKind int

const (
	// Refuse replies with the error Class and Desc.
	Refuse FaultKind = iota + 1
	// Silent never replies; the connection stays open.
	Silent
	// Garbage sends Raw as a line instead of the reply.
	Garbage
	// HangUp sends the first half of the reply, waits until the client
	// has read it, and closes the connection.
	HangUp
	// WrongID replies with an id other than the command's. The command
	// is executed.
	WrongID
	// Huge pads the reply with Size bytes (default 70 KiB, beyond
	// go-qemu's 64 KiB line limit). The command is executed.
	Huge
)

func (k FaultKind) String() string {
	switch k {
	case 0:
		return "none"
	case Refuse:
		return "refuse"
	case Silent:
		return "silent"
	case Garbage:
		return "garbage"
	case HangUp:
		return "hang-up"
	case WrongID:
		return "wrong-id"
	case Huge:
		return "huge"
	}
	return "unknown"
}

// Fault is one command's fault.
type Fault struct {
	Kind  FaultKind
	Class string // Refuse
	Desc  string // Refuse
	Raw   string // Garbage
	Size  int    // Huge
	// Execute runs the command before the reply goes wrong (as for
	// WrongID and Huge); otherwise Refuse, Silent, Garbage and HangUp
	// leave the state alone.
	Execute bool
}

// Error is a QMP error reply's class and description.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Class + ": " + e.Desc }
