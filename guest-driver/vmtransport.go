package guestdriver

import (
	"context"
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// ErrNoDoorbells: the transport has no doorbell region mapped (the
// front-end lacks SHMEM, or the device chose the guest-RAM fallback).
var ErrNoDoorbells = errors.New("guestdriver: doorbell region not mapped")

// VMTransport is a Transport over a simulated VM whose device has been
// started (vm.Start). Commands go through the VM's control queue with
// vm.Request, which serialises them; event buffers through the VM's
// posted-buffer API on abi.QueueEvent, whose bookkeeping lives in the VM,
// so a driver opened after another one still reads the events that land
// in its predecessor's buffers.
type VMTransport struct {
	vm *vmsim.VM
}

var _ Transport = (*VMTransport)(nil)

// NewVMTransport returns a transport over vm.
func NewVMTransport(vm *vmsim.VM) *VMTransport { return &VMTransport{vm: vm} }

// Command implements Transport.
func (t *VMTransport) Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error) {
	resp, err := t.vm.Request(ctx, abi.QueueControl, req, respLen)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: control queue: %w", err)
	}
	return resp, nil
}

// ReadConfig implements Transport.
func (t *VMTransport) ReadConfig(ctx context.Context) ([]byte, error) {
	b, err := t.vm.ReadConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: config space: %w", err)
	}
	return b, nil
}

// Doorbells implements Transport: all of shared memory region
// abi.DoorbellShmID, provided the device has mapped every byte of it
// (touching an unmapped part of the region would fault, as on real
// hardware).
func (t *VMTransport) Doorbells() (guestmem.View, error) {
	whole := t.vm.Shmem(abi.DoorbellShmID)
	if whole.Len() == 0 {
		return guestmem.View{}, fmt.Errorf("shmid %d has no region: %w", abi.DoorbellShmID, ErrNoDoorbells)
	}
	v, err := t.vm.ShmemMapped(abi.DoorbellShmID, 0, whole.Len())
	if err != nil {
		return guestmem.View{}, fmt.Errorf("shmid %d: %v: %w", abi.DoorbellShmID, err, ErrNoDoorbells)
	}
	return v, nil
}

// AllocDMA implements Transport with the VM's guest RAM allocator (which
// hands out fresh, zero memory and never frees; Device recycles what it
// frees itself).
func (t *VMTransport) AllocDMA(size, align uint64) (Buffer, error) {
	gpa, err := t.vm.Alloc(size, align)
	if err != nil {
		return Buffer{}, fmt.Errorf("guestdriver: dma memory: %w", err)
	}
	return t.buffer(gpa, size)
}

func (t *VMTransport) buffer(gpa, size uint64) (Buffer, error) {
	v, err := t.vm.Memory().Translate(gpa, size)
	if err != nil {
		return Buffer{}, fmt.Errorf("guestdriver: dma memory at %#x: %w", gpa, err)
	}
	return Buffer{GPA: gpa, View: v}, nil
}

// NotifyWakeup implements Transport: the guest's write to the wakeup
// queue's notify address (the queue's ioeventfd).
func (t *VMTransport) NotifyWakeup() error {
	if err := t.vm.Kick(abi.QueueWakeup); err != nil {
		return fmt.Errorf("guestdriver: wakeup kick: %w", err)
	}
	return nil
}

// PostEventBuffers implements Transport.
func (t *VMTransport) PostEventBuffers(bufs ...Buffer) error {
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

// PostedEventBuffers implements Transport: every outstanding chain on the
// event queue is one buffer (PostWritable posts one-descriptor chains).
// Meaningful while no other goroutine posts or takes event buffers, as
// when Open calls it.
func (t *VMTransport) PostedEventBuffers() (int, error) {
	q := t.vm.Queue(abi.QueueEvent)
	if q == nil {
		return 0, fmt.Errorf("guestdriver: event queue is not set up")
	}
	return int(q.Size()) - q.NumFree(), nil
}

// TakeEvent implements Transport.
func (t *VMTransport) TakeEvent() (Buffer, uint32, bool, error) {
	vb, written, ok, err := t.vm.TakeUsed(abi.QueueEvent)
	if err != nil {
		return Buffer{}, 0, false, fmt.Errorf("guestdriver: event queue: %w", err)
	}
	if !ok {
		return Buffer{}, 0, false, nil
	}
	b, err := t.buffer(vb.Addr, uint64(vb.Len))
	if err != nil {
		return Buffer{}, 0, false, err
	}
	return b, written, true, nil
}

// WaitEvents implements Transport.
func (t *VMTransport) WaitEvents(ctx context.Context) error {
	if err := t.vm.WaitUsed(ctx, abi.QueueEvent); err != nil {
		return fmt.Errorf("guestdriver: event queue: %w", err)
	}
	return nil
}

// VMConfig is how a VMM launches a vStellar device: the vmsim equivalent of
// QEMU's `-device vhost-user-test-device-pci,virtio-id=42,num_vqs=3,
// vq_size=256,config_size=256` with memSize bytes of memfd guest RAM.
func VMConfig(socketPath string, memSize uint64) vmsim.Config {
	return vmsim.Config{
		SocketPath: socketPath,
		MemSize:    memSize,
		NumQueues:  abi.NumQueues,
		QueueSize:  abi.DefaultQueueSize,
		ConfigSize: abi.ConfigSize,
	}
}
