package vmsim

import (
	"context"
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Transport is the guest verbs library's guestdriver.Transport over a
// simulated VM whose device has been started (vm.Start): what a guest
// driver inside this VM would use. Commands go through the VM's control queue with
// vm.Request, which serialises them; event buffers through the VM's
// posted-buffer API on abi.QueueEvent, whose bookkeeping lives in the VM,
// so a driver opened after another one still reads the events that land
// in its predecessor's buffers.
type Transport struct {
	vm *VM
}

var _ guestdriver.Transport = (*Transport)(nil)

// NewTransport returns a transport over vm.
func NewTransport(vm *VM) *Transport { return &Transport{vm: vm} }

// Command implements guestdriver.Transport.
func (t *Transport) Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error) {
	resp, err := t.vm.Request(ctx, abi.QueueControl, req, respLen)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: control queue: %w", err)
	}
	return resp, nil
}

// ReadConfig implements guestdriver.Transport.
func (t *Transport) ReadConfig(ctx context.Context) ([]byte, error) {
	b, err := t.vm.ReadConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: config space: %w", err)
	}
	return b, nil
}

// Doorbells implements guestdriver.Transport: all of shared memory region
// abi.DoorbellShmID, provided the device has mapped every byte of it
// (touching an unmapped part of the region would fault, as on real
// hardware).
func (t *Transport) Doorbells() (guestmem.View, error) {
	whole := t.vm.Shmem(abi.DoorbellShmID)
	if whole.Len() == 0 {
		return guestmem.View{}, fmt.Errorf("shmid %d has no region: %w", abi.DoorbellShmID, guestdriver.ErrNoDoorbells)
	}
	v, err := t.vm.ShmemMapped(abi.DoorbellShmID, 0, whole.Len())
	if err != nil {
		return guestmem.View{}, fmt.Errorf("shmid %d: %v: %w", abi.DoorbellShmID, err, guestdriver.ErrNoDoorbells)
	}
	return v, nil
}

// AllocDMA implements guestdriver.Transport with the VM's guest RAM allocator (which
// hands out fresh, zero memory and never frees; Device recycles what it
// frees itself).
func (t *Transport) AllocDMA(size, align uint64) (guestdriver.Buffer, error) {
	gpa, err := t.vm.Alloc(size, align)
	if err != nil {
		return guestdriver.Buffer{}, fmt.Errorf("guestdriver: dma memory: %w", err)
	}
	return t.buffer(gpa, size)
}

func (t *Transport) buffer(gpa, size uint64) (guestdriver.Buffer, error) {
	v, err := t.vm.Memory().Translate(gpa, size)
	if err != nil {
		return guestdriver.Buffer{}, fmt.Errorf("guestdriver: dma memory at %#x: %w", gpa, err)
	}
	return guestdriver.Buffer{GPA: gpa, View: v}, nil
}

// NotifyWakeup implements guestdriver.Transport: the guest's write to the wakeup
// queue's notify address (the queue's ioeventfd).
func (t *Transport) NotifyWakeup() error {
	if err := t.vm.Kick(abi.QueueWakeup); err != nil {
		return fmt.Errorf("guestdriver: wakeup kick: %w", err)
	}
	return nil
}

// PostEventBuffers implements guestdriver.Transport.
func (t *Transport) PostEventBuffers(bufs ...guestdriver.Buffer) error {
	vb := make([]virtio.Buffer, 0, len(bufs))
	for _, b := range bufs {
		if b.Len() == 0 || b.Len() > 1<<31 {
			return fmt.Errorf("guestdriver: event buffer of %d bytes", b.Len())
		}
		vb = append(vb, virtio.Buffer{Addr: b.GPA, Len: uint32(b.Len())})
	}
	if err := t.vm.PostWritable(abi.QueueEvent, vb...); err != nil {
		return fmt.Errorf("guestdriver: event queue: %w", err)
	}
	return nil
}

// PostedEventBuffers implements guestdriver.Transport: every outstanding chain on the
// event queue is one buffer (PostWritable posts one-descriptor chains).
// Meaningful while no other goroutine posts or takes event buffers, as
// when Open calls it.
func (t *Transport) PostedEventBuffers() (int, error) {
	q := t.vm.Queue(abi.QueueEvent)
	if q == nil {
		return 0, fmt.Errorf("guestdriver: event queue is not set up")
	}
	return int(q.Size()) - q.NumFree(), nil
}

// TakeEvent implements guestdriver.Transport.
func (t *Transport) TakeEvent() (guestdriver.Buffer, uint32, bool, error) {
	vb, written, ok, err := t.vm.TakeUsed(abi.QueueEvent)
	if err != nil {
		return guestdriver.Buffer{}, 0, false, fmt.Errorf("guestdriver: event queue: %w", err)
	}
	if !ok {
		return guestdriver.Buffer{}, 0, false, nil
	}
	b, err := t.buffer(vb.Addr, uint64(vb.Len))
	if err != nil {
		return guestdriver.Buffer{}, 0, false, err
	}
	return b, written, true, nil
}

// WaitEvents implements guestdriver.Transport.
func (t *Transport) WaitEvents(ctx context.Context) error {
	if err := t.vm.WaitUsed(ctx, abi.QueueEvent); err != nil {
		return fmt.Errorf("guestdriver: event queue: %w", err)
	}
	return nil
}

// DeviceConfig is how a VMM launches a vStellar device: the equivalent of
// QEMU's `-device vhost-user-test-device-pci,virtio-id=42,num_vqs=3,
// vq_size=256,config_size=256` with memSize bytes of memfd guest RAM.
func DeviceConfig(socketPath string, memSize uint64) Config {
	return Config{
		SocketPath: socketPath,
		MemSize:    memSize,
		NumQueues:  abi.NumQueues,
		QueueSize:  abi.DefaultQueueSize,
		ConfigSize: abi.ConfigSize,
	}
}
