package device

import (
	"fmt"

	"github.com/vstellar/vstellar/virtio/abi"
)

// config returns the current config space contents.
func (d *Device) config() abi.Config {
	return abi.Config{
		ABIVersion:  abi.ABIVersion,
		Status:      d.status.Load(),
		NodeGUID:    d.guid,
		Limits:      d.limits,
		PhysPortCnt: physPorts,
		Doorbell:    d.layout,
	}
}

// ConfigSize implements vhost.Device.
func (d *Device) ConfigSize() uint32 { return abi.ConfigSize }

// ReadConfig implements vhost.Device. The whole space is re-encoded on
// every read (256 bytes) so a read always sees one consistent status word.
// A range outside config space (which the Backend already rules out) reads
// as zeros rather than panicking.
func (d *Device) ReadConfig(offset uint32, buf []byte) {
	b, _ := d.config().MarshalBinary()
	clear(buf)
	if uint64(offset) < uint64(len(b)) {
		copy(buf, b[offset:])
	}
}

// WriteConfig implements vhost.Device. Every field of vStellar config space
// is read-only (limits, geometry and status are the device's to set), so
// every write is rejected; the Backend reports the failure to the
// front-end.
func (d *Device) WriteConfig(offset uint32, data []byte) error {
	d.stats.configWrites.Add(1)
	return fmt.Errorf("device %q: %d-byte write at config offset %#x: %w", d.name, len(data), offset, ErrReadOnlyConfig)
}
