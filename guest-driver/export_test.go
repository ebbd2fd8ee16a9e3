package guestdriver

import (
	"context"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Hooks for the tests that run the driver over the simulated VM. Those
// are in package guestdriver_test because the VM's transport
// (internal/sim/vmsim) imports this package, so they reach the driver's
// insides through these.

const EventBuffersForTest = eventBuffers

func (d *Device) CallForTest(ctx context.Context, op abi.Opcode, req, resp any) error {
	return d.call(ctx, op, req, resp)
}

func (d *Device) CommandForTest(ctx context.Context, op abi.Opcode, payload []byte, respSize int) ([]byte, error) {
	return d.command(ctx, op, payload, respSize)
}

// DoorbellAreaForTest is the registered doorbell area, read without the
// lock as the tests did from inside the package (DoorbellArea takes it).
func (d *Device) DoorbellAreaForTest() Buffer { return d.db.area }

func (cq *CQ) DoorbellRecordForTest() guestmem.View { return cq.rec }

func (cq *CQ) ArmSNForTest() uint32 { return cq.armSN }
