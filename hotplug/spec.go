package hotplug

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// DefaultDriver is QEMU's generic vhost-user PCI device, user-creatable
// from QEMU 10.2 (before that it is called vhost-user-device-pci and
// cannot be created from the command line or QMP).
const DefaultDriver = "vhost-user-test-device-pci"

// Limits a Spec is checked against.
const (
	// MaxIDLen bounds qdev, chardev and bus ids. QEMU has no limit; this
	// keeps QOM paths and QMP lines short.
	MaxIDLen = 100
	// MaxQueues is QEMU's VIRTIO_QUEUE_MAX.
	MaxQueues = 1024
	// MaxConfigSize is QEMU's VHOST_USER_MAX_CONFIG_SIZE.
	MaxConfigSize = 256
	// sunPathMax is sizeof(sockaddr_un.sun_path) less the NUL.
	sunPathMax = 107
	// maxReconnect bounds reconnect-ms to something an operator meant.
	maxReconnect = 24 * time.Hour
)

// Spec describes one vStellar device to attach to a VM: the vhost-user
// socket vstellard serves it on and the properties of QEMU's generic
// vhost-user device. Zero fields take the vStellar defaults
// (WithDefaults).
type Spec struct {
	// ID is the device's qdev id in QEMU, e.g. "vst0". Its chardev is
	// ChardevID(): ID + "-chr".
	ID string `json:"id"`
	// Socket is the absolute path of the device's vhost-user socket.
	Socket string `json:"socket"`
	// Driver is the QEMU device model; default DefaultDriver.
	Driver string `json:"driver,omitempty"`
	// VirtioID is the virtio device id; default abi.DeviceID (42).
	VirtioID int `json:"virtio_id,omitempty"`
	// NumQueues, QueueSize and ConfigSize are num_vqs, vq_size and
	// config_size; defaults abi.NumQueues, abi.DefaultQueueSize and
	// abi.ConfigSize.
	NumQueues  int `json:"num_queues,omitempty"`
	QueueSize  int `json:"queue_size,omitempty"`
	ConfigSize int `json:"config_size,omitempty"`
	// Bus is the id of the bus to plug into, e.g. a free pcie-root-port
	// on q35 (whose root bus takes no hot-plug). Empty lets QEMU pick.
	Bus string `json:"bus,omitempty"`
	// Reconnect, if non-zero, is the chardev's reconnect-ms: QEMU
	// reconnects to a restarted vstellard that often. Zero means none:
	// QEMU connects once, when the chardev is created, and fails if
	// nothing listens.
	Reconnect time.Duration `json:"reconnect,omitempty"`
}

// WithDefaults returns s with zero fields set to the vStellar device's
// values.
func (s Spec) WithDefaults() Spec {
	if s.Driver == "" {
		s.Driver = DefaultDriver
	}
	if s.VirtioID == 0 {
		s.VirtioID = abi.DeviceID
	}
	if s.NumQueues == 0 {
		s.NumQueues = abi.NumQueues
	}
	if s.QueueSize == 0 {
		s.QueueSize = abi.DefaultQueueSize
	}
	if s.ConfigSize == 0 {
		s.ConfigSize = abi.ConfigSize
	}
	return s
}

// ChardevID is the id of the chardev carrying the device's vhost-user
// connection.
func (s Spec) ChardevID() string { return ChardevID(s.ID) }

// ChardevID is the chardev id Attach and QEMUArgs use for device id.
func ChardevID(id string) string { return id + "-chr" }

// Validate checks s with defaults applied. The error wraps ErrInvalid.
func (s Spec) Validate() error {
	s = s.WithDefaults()
	if err := ValidateID("device id", s.ID); err != nil {
		return err
	}
	if err := ValidateID("chardev id", s.ChardevID()); err != nil {
		return err
	}
	if s.Bus != "" {
		if err := ValidateID("bus", s.Bus); err != nil {
			return err
		}
	}
	if err := validateSocket(s.Socket); err != nil {
		return err
	}
	// A driver is a QOM type name; the same character set as ids keeps
	// it from smuggling options into a -device argument.
	if err := validateName("driver", s.Driver, false); err != nil {
		return err
	}
	if s.VirtioID < 1 || s.VirtioID > 0xffff {
		return fmt.Errorf("%w: virtio id %d is outside 1..65535", ErrInvalid, s.VirtioID)
	}
	if s.NumQueues < 1 || s.NumQueues > MaxQueues {
		return fmt.Errorf("%w: %d queues is outside 1..%d", ErrInvalid, s.NumQueues, MaxQueues)
	}
	// QEMU aborts (virtio_add_queue) on a queue larger than its
	// VIRTQUEUE_MAX_SIZE, 1024, which is also the most vstellard accepts.
	if s.QueueSize < 1 || s.QueueSize > abi.MaxQueueSize || s.QueueSize&(s.QueueSize-1) != 0 {
		return fmt.Errorf("%w: queue size %d is not a power of two in 1..%d", ErrInvalid, s.QueueSize, abi.MaxQueueSize)
	}
	if s.ConfigSize < 0 || s.ConfigSize > MaxConfigSize {
		return fmt.Errorf("%w: config size %d is outside 0..%d", ErrInvalid, s.ConfigSize, MaxConfigSize)
	}
	if s.VirtioID == abi.DeviceID {
		// The vStellar device's driver needs all its queues and its
		// whole config space (the limits are at its end).
		if s.NumQueues != abi.NumQueues {
			return fmt.Errorf("%w: the vStellar device (virtio id %d) has %d queues, not %d", ErrInvalid, abi.DeviceID, abi.NumQueues, s.NumQueues)
		}
		if s.ConfigSize != abi.ConfigSize {
			return fmt.Errorf("%w: the vStellar device's config space is %d bytes, not %d", ErrInvalid, abi.ConfigSize, s.ConfigSize)
		}
	}
	if s.Reconnect < 0 || s.Reconnect > maxReconnect || s.Reconnect%time.Millisecond != 0 {
		return fmt.Errorf("%w: reconnect %v is not a whole number of milliseconds in 0..%v", ErrInvalid, s.Reconnect, maxReconnect)
	}
	return nil
}

// ValidateID checks a QEMU id (qdev, chardev, object): a letter, then
// letters, digits, '-', '.' and '_' (QEMU's id_wellformed), at most
// MaxIDLen bytes. what names it in the error, which wraps ErrInvalid.
func ValidateID(what, id string) error { return validateName(what, id, true) }

func validateName(what, s string, letterFirst bool) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	}
	if len(s) > MaxIDLen {
		return fmt.Errorf("%w: %s is %d bytes long, the limit is %d", ErrInvalid, what, len(s), MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		switch {
		case i == 0 && letterFirst && !letter:
			return fmt.Errorf("%w: %s %q must start with a letter", ErrInvalid, what, s)
		case !letter && !(c >= '0' && c <= '9') && c != '-' && c != '.' && c != '_':
			return fmt.Errorf("%w: %s %q has a character outside [A-Za-z0-9_.-] at byte %d", ErrInvalid, what, s, i)
		}
	}
	return nil
}

func validateSocket(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: socket path is empty", ErrInvalid)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%w: socket path %q is not absolute (QEMU resolves it in its own working directory)", ErrInvalid, p)
	case len(p) > sunPathMax:
		return fmt.Errorf("%w: socket path is %d bytes long, the limit is %d", ErrInvalid, len(p), sunPathMax)
	case strings.ContainsAny(p, "\x00\n"):
		return fmt.Errorf("%w: socket path %q holds a NUL or newline", ErrInvalid, p)
	}
	return nil
}
