package abi

// DeviceID is the virtio device id of the vStellar RDMA device. The virtio
// specification reserves 42 for "RDMA device" without defining it; 30, used
// by an earlier virtio-rdma RFC, now belongs to another device.
const DeviceID = 42

// PCIDeviceID is the modern virtio-pci device id (0x1040 + DeviceID) and
// PCIVendorID the virtio vendor id. QUERY_DEVICE reports them as vendor id
// and part id, which is what lspci shows for the device in the guest.
const (
	PCIVendorID = 0x1af4
	PCIDeviceID = 0x1040 + DeviceID
)

// Virtqueue indices. Only control traffic uses virtqueues: work requests,
// completions and doorbells live in guest memory and the doorbell region,
// so the number of queues does not grow with the number of QPs and CQs (the
// per-QP-virtqueue design of earlier virtio-rdma proposals was rejected for
// exactly that reason).
const (
	// QueueControl carries control commands (driver -> device requests,
	// device -> driver responses), one request per descriptor chain.
	QueueControl = 0
	// QueueEvent carries asynchronous events (QP fatal, CQ error, port
	// state, CQ completion notifications): the driver posts
	// device-writable buffers and the device fills one per event. Its
	// record format is defined with the data path.
	QueueEvent = 1
	// QueueWakeup is the idle-engine kick path: when the data-path engine
	// has gone idle it says so in the doorbell region's device page, and
	// a driver that rings a doorbell then also kicks this queue so that
	// an idle device costs no CPU and a busy one never waits for a kick.
	QueueWakeup = 2

	// NumQueues is the number of virtqueues the device has.
	NumQueues = 3
)

// Queue sizes. The control queue is synchronous per request in the
// reference driver, so a modest size suffices; the maximum bounds what a
// front-end may ask for with SET_VRING_NUM.
const (
	DefaultQueueSize = 256
	MaxQueueSize     = 1024
)

// QueueName names a virtqueue index for logs and metrics.
func QueueName(idx int) string {
	switch idx {
	case QueueControl:
		return "control"
	case QueueEvent:
		return "event"
	case QueueWakeup:
		return "wakeup"
	}
	return "invalid"
}
