//go:build linux

package virtiopci

import (
	"context"
	"fmt"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// struct virtio_pci_common_cfg (VIRTIO 1.2 §4.1.4.3), offsets.
const (
	ccDeviceFeatureSelect = 0x00 // le32
	ccDeviceFeature       = 0x04 // le32
	ccDriverFeatureSelect = 0x08 // le32
	ccDriverFeature       = 0x0c // le32
	ccConfigMSIXVector    = 0x10 // le16
	ccNumQueues           = 0x12 // le16
	ccDeviceStatus        = 0x14 // u8
	ccConfigGeneration    = 0x15 // u8
	ccQueueSelect         = 0x16 // le16
	ccQueueSize           = 0x18 // le16
	ccQueueMSIXVector     = 0x1a // le16
	ccQueueEnable         = 0x1c // le16
	ccQueueNotifyOff      = 0x1e // le16
	ccQueueDesc           = 0x20 // le64
	ccQueueDriver         = 0x28 // le64
	ccQueueDevice         = 0x30 // le64
	commonCfgLen          = 0x38 // through queue_device

	// noVector is VIRTIO_MSI_NO_VECTOR: uio_pci_generic gives INTx only.
	noVector = 0xffff
)

// common is the device's common configuration structure in BAR memory.
// Every access is one MMIO access of the field's width; 64-bit fields
// are written as two 32-bit halves, low first, as the spec allows and
// QEMU's 4-byte register implementation needs.
type common struct{ v guestmem.View }

func (c common) status() virtio.Status     { return virtio.Status(c.v.MMIORead8(ccDeviceStatus)) }
func (c common) setStatus(s virtio.Status) { c.v.MMIOWrite8(ccDeviceStatus, uint8(s)) }
func (c common) generation() uint8         { return c.v.MMIORead8(ccConfigGeneration) }
func (c common) numQueues() uint16         { return c.v.MMIORead16(ccNumQueues) }

// addStatus sets bits in the status byte, keeping the ones already set.
func (c common) addStatus(s virtio.Status) { c.setStatus(c.status() | s) }

// deviceFeatures reads both 32-bit halves of the offered features.
func (c common) deviceFeatures() uint64 {
	c.v.MMIOWrite32(ccDeviceFeatureSelect, 0)
	lo := c.v.MMIORead32(ccDeviceFeature)
	c.v.MMIOWrite32(ccDeviceFeatureSelect, 1)
	hi := c.v.MMIORead32(ccDeviceFeature)
	return uint64(hi)<<32 | uint64(lo)
}

func (c common) setDriverFeatures(f uint64) {
	c.v.MMIOWrite32(ccDriverFeatureSelect, 0)
	c.v.MMIOWrite32(ccDriverFeature, uint32(f))
	c.v.MMIOWrite32(ccDriverFeatureSelect, 1)
	c.v.MMIOWrite32(ccDriverFeature, uint32(f>>32))
}

func (c common) write64(off uint64, x uint64) {
	c.v.MMIOWrite32(off, uint32(x))
	c.v.MMIOWrite32(off+4, uint32(x>>32))
}

// reset writes 0 to the status and waits until the device reads back 0
// (spec §4.1.4.3.2: the reset is complete only then).
func (c common) reset(ctx context.Context) error {
	c.setStatus(0)
	for delay := 10 * time.Microsecond; c.status() != 0; delay = min(2*delay, 10*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("virtiopci: device reset: status %v: %w", c.status(), ctx.Err())
		case <-time.After(delay):
		}
	}
	return nil
}

// queueSetup is what setQueue writes for one queue.
type queueSetup struct {
	index uint16
	size  uint16
	addrs virtio.RingAddrs
}

// selectQueue selects queue i and returns its size (0: no such queue)
// and notify offset.
func (c common) selectQueue(i uint16) (size, notifyOff uint16) {
	c.v.MMIOWrite16(ccQueueSelect, i)
	return c.v.MMIORead16(ccQueueSize), c.v.MMIORead16(ccQueueNotifyOff)
}

// enableQueue programs a queue's size and rings, with no MSI-X vector,
// and enables it.
func (c common) enableQueue(q queueSetup) {
	c.v.MMIOWrite16(ccQueueSelect, q.index)
	c.v.MMIOWrite16(ccQueueSize, q.size)
	c.v.MMIOWrite16(ccQueueMSIXVector, noVector)
	c.write64(ccQueueDesc, q.addrs.Desc)
	c.write64(ccQueueDriver, q.addrs.Avail)
	c.write64(ccQueueDevice, q.addrs.Used)
	c.v.MMIOWrite16(ccQueueEnable, 1)
}
