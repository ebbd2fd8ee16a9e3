package guestdriver

import (
	"context"
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
	"github.com/vstellar/vstellar/vmm"
)

// ErrNoDoorbells: the transport has no doorbell region mapped (the
// front-end lacks SHMEM, or the device chose the guest-RAM fallback).
var ErrNoDoorbells = errors.New("guestdriver: doorbell region not mapped")

// VMTransport is a Transport over a simulated VM whose device has been
// started (vm.Start). Commands go through the VM's control queue with
// vm.Request, which serialises them.
type VMTransport struct {
	vm *vmm.VM
}

var _ Transport = (*VMTransport)(nil)

// NewVMTransport returns a transport over vm.
func NewVMTransport(vm *vmm.VM) *VMTransport { return &VMTransport{vm: vm} }

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

// VMConfig is how a VMM launches a vStellar device: the vmm equivalent of
// QEMU's `-device vhost-user-test-device-pci,virtio-id=42,num_vqs=3,
// vq_size=256,config_size=256` with memSize bytes of memfd guest RAM.
func VMConfig(socketPath string, memSize uint64) vmm.Config {
	return vmm.Config{
		SocketPath: socketPath,
		MemSize:    memSize,
		NumQueues:  abi.NumQueues,
		QueueSize:  abi.DefaultQueueSize,
		ConfigSize: abi.ConfigSize,
	}
}
