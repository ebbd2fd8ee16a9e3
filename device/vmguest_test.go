package device

import (
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/internal/testkit/vhosttest"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// This file is the harness that drives a Device the way production does:
// served by a real vhost.Backend on a unix socket, driven by package vmsim's
// QEMU-exact front-end with memfd guest RAM, kick and call eventfds and
// (unless disabled) SHMEM_MAP'd doorbells. Commands travel the control
// virtqueue; events arrive on the event virtqueue.

// vmOpts tweaks the simulated VM.
type vmOpts struct {
	// noShmem hides the SHMEM protocol feature from the back-end: the
	// device falls back to guest-RAM doorbells.
	noShmem bool
	// driverFeatures, if set, is what the guest driver is willing to ack.
	driverFeatures uint64
	// memSize is the guest RAM size (default 64 MiB).
	memSize uint64
}

// vmGuest is one VM with the device plugged in.
type vmGuest struct {
	t   testing.TB
	d   *Device
	b   *vhost.Backend
	vm  *vmsim.VM
	ctx context.Context

	// scratch is guest memory for batched commands: batchMax slots of
	// batchReq request bytes and batchResp response bytes.
	scratch uint64
}

const (
	vmQueueSize = 256
	batchMax    = 128
	batchReq    = 256
	batchResp   = 512
)

// serveDevice serves d on a unix socket in a temporary directory and
// returns the socket path.
func serveDevice(t testing.TB, d *Device) (*vhost.Backend, string) {
	t.Helper()
	b := vhost.NewBackend(d, vhost.Options{Name: d.Name(), Logger: quietLog()})
	return b, vhosttest.Serve(t, b, d.Name())
}

// startVM creates a VM around d and starts the device (DRIVER_OK).
func startVM(t testing.TB, d *Device, o vmOpts) *vmGuest {
	t.Helper()
	b, path := serveDevice(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if o.memSize == 0 {
		o.memSize = 64 << 20
	}
	cfg := vmsim.Config{
		SocketPath: path, MemSize: o.memSize, NumQueues: abi.NumQueues, QueueSize: vmQueueSize,
		ConfigSize: abi.ConfigSize, DeviceFeatures: o.driverFeatures, Logger: quietLog(),
	}
	if o.noShmem {
		cfg.ProtocolFeatures = ^uint64(0) &^ (1 << vhost.ProtoShmem)
	}
	vm, err := vmsim.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The Backend activates the device on a goroutine of its own once the
	// rings start (activation may wait for SHMEM_MAP's acknowledgement,
	// which the front-end gives only between its own requests).
	wait.For(t, "device activation", d.active.Load)
	g := &vmGuest{t: t, d: d, b: b, vm: vm, ctx: ctx}
	g.scratch = g.alloc(batchMax*(batchReq+batchResp), 4096)
	return g
}

// alloc reserves guest RAM.
func (g *vmGuest) alloc(size, align uint64) uint64 {
	g.t.Helper()
	gpa, err := g.vm.Alloc(size, align)
	if err != nil {
		g.t.Fatal(err)
	}
	return gpa
}

// bytes is the guest's view of n bytes at gpa.
func (g *vmGuest) bytes(gpa, n uint64) []byte {
	g.t.Helper()
	v, err := g.vm.Memory().Translate(gpa, n)
	if err != nil {
		g.t.Fatal(err)
	}
	return v.Bytes()
}

// enc builds a request for op with payload v (nil: no payload).
func enc(op abi.Opcode, v any) []byte {
	var p []byte
	if v != nil {
		p = abi.EncodePayload(nil, v)
	}
	return abi.AppendRequest(nil, op, p)
}

// respLen is the response size op needs on success.
func respLen(op abi.Opcode) uint32 {
	n, _ := op.ResponseSize()
	return uint32(abi.ResponseHeaderSize + n)
}

// raw sends a framed request and returns the status and payload.
func (g *vmGuest) raw(req []byte, respLen uint32) (abi.Status, []byte) {
	g.t.Helper()
	resp, err := g.vm.Request(g.ctx, abi.QueueControl, req, respLen)
	if err != nil {
		g.t.Fatal(err)
	}
	st, payload, err := abi.DecodeResponse(resp)
	if err != nil {
		g.t.Fatalf("response %x: %v", resp, err)
	}
	return st, payload
}

// do runs op with request payload req and decodes an OK response into
// resp (if not nil).
func (g *vmGuest) do(op abi.Opcode, req, resp any) abi.Status {
	g.t.Helper()
	st, payload := g.raw(enc(op, req), respLen(op))
	if st == abi.StatusOK && resp != nil {
		if err := abi.DecodePayload(payload, resp); err != nil {
			g.t.Fatalf("%v response: %v", op, err)
		}
	}
	if st != abi.StatusOK && len(payload) != 0 {
		g.t.Fatalf("%v: status %v with a %d-byte payload", op, st, len(payload))
	}
	return st
}

// must runs op and fails the test unless it succeeds.
func (g *vmGuest) must(op abi.Opcode, req, resp any) {
	g.t.Helper()
	if st := g.do(op, req, resp); st != abi.StatusOK {
		g.t.Fatalf("%v: %v", op, st)
	}
}

// want runs op and fails the test unless it gets status want.
func (g *vmGuest) want(want abi.Status, op abi.Opcode, req any) {
	g.t.Helper()
	if st := g.do(op, req, nil); st != want {
		g.t.Fatalf("%v %+v: status %v, want %v", op, req, st, want)
	}
}

// batch sends up to batchMax framed requests at once (one publish, one
// kick) and returns their statuses in order.
func (g *vmGuest) batch(reqs [][]byte) []abi.Status {
	g.t.Helper()
	if len(reqs) > batchMax {
		g.t.Fatalf("batch of %d", len(reqs))
	}
	q := g.vm.Queue(abi.QueueControl)
	heads := map[uint16]int{}
	for i, r := range reqs {
		if len(r) > batchReq {
			g.t.Fatalf("request of %d bytes", len(r))
		}
		base := g.scratch + uint64(i)*(batchReq+batchResp)
		copy(g.bytes(base, uint64(len(r))), r)
		var rd []virtio.Buffer
		if len(r) > 0 {
			rd = []virtio.Buffer{{Addr: base, Len: uint32(len(r))}}
		}
		h, err := q.Add(rd, []virtio.Buffer{{Addr: base + batchReq, Len: batchResp}})
		if err != nil {
			g.t.Fatal(err)
		}
		heads[h] = i
	}
	if q.Publish() {
		if err := g.vm.Kick(abi.QueueControl); err != nil {
			g.t.Fatal(err)
		}
	}
	out := make([]abi.Status, len(reqs))
	for got := 0; got < len(reqs); {
		h, n, ok := q.GetUsed()
		if !ok {
			if q.EnableInterrupts() {
				continue
			}
			if err := g.vm.WaitInterrupt(g.ctx, abi.QueueControl); err != nil {
				g.t.Fatal(err)
			}
			continue
		}
		i, known := heads[h]
		if !known {
			g.t.Fatalf("used head %d was not submitted", h)
		}
		delete(heads, h)
		base := g.scratch + uint64(i)*(batchReq+batchResp)
		st, _, err := abi.DecodeResponse(g.bytes(base+batchReq, uint64(n)))
		if err != nil {
			g.t.Fatalf("response %d: %v", i, err)
		}
		out[i] = st
		got++
	}
	return out
}

// Object helpers.

func (g *vmGuest) allocPD() uint32 {
	g.t.Helper()
	var r abi.HandleResp
	g.must(abi.OpAllocPD, nil, &r)
	return r.Handle
}

// cqRing allocates a CQ ring of n entries.
func (g *vmGuest) cqRing(n uint32) uint64 { return g.alloc(uint64(n)*abi.CQESize, abi.CQESize) }

func (g *vmGuest) createCQ(n uint32) abi.CreateCQResp {
	g.t.Helper()
	var r abi.CreateCQResp
	g.must(abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: g.cqRing(n), Entries: n}, &r)
	return r
}

// qpReq is a CREATE_QP request for an RC QP with small rings allocated in
// guest RAM.
func (g *vmGuest) qpReq(pdn, scq, rcq uint32) *abi.CreateQPReq {
	r := &abi.CreateQPReq{
		PDN: pdn, Type: abi.QPTypeRC, SendCQN: scq, RecvCQN: rcq,
		SQSize: 4, RQSize: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64,
	}
	ss, rs := abi.SendWQEStride(r.MaxSendSGE, r.MaxInlineData), abi.RecvWQEStride(r.MaxRecvSGE)
	r.SQAddr = g.alloc(uint64(r.SQSize*ss), uint64(ss))
	r.RQAddr = g.alloc(uint64(r.RQSize*rs), uint64(rs))
	return r
}

func (g *vmGuest) createQP(pdn, scq, rcq uint32) abi.CreateQPResp {
	g.t.Helper()
	var r abi.CreateQPResp
	g.must(abi.OpCreateQP, g.qpReq(pdn, scq, rcq), &r)
	return r
}

// regMR registers n bytes of fresh guest RAM and returns the key and the
// guest physical address.
func (g *vmGuest) regMR(pdn uint32, access abi.Access, n uint64) (uint32, uint64) {
	g.t.Helper()
	gpa := g.alloc(n, 4096)
	var r abi.RegMRResp
	g.must(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, Access: access, IOVA: gpa, Length: n, Addr: gpa}, &r)
	if r.LKey != r.RKey || r.LKey == 0 {
		g.t.Fatalf("REG_MR keys %#x/%#x", r.LKey, r.RKey)
	}
	return r.LKey, gpa
}

// postEventBuffers posts n device-writable buffers of size bytes on the
// event queue and kicks it.
func (g *vmGuest) postEventBuffers(n int, size uint32) []uint64 {
	g.t.Helper()
	q := g.vm.Queue(abi.QueueEvent)
	var addrs []uint64
	for range n {
		a := g.alloc(uint64(size), 8)
		if _, err := q.Add(nil, []virtio.Buffer{{Addr: a, Len: size}}); err != nil {
			g.t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	q.Publish()
	if err := g.vm.Kick(abi.QueueEvent); err != nil {
		g.t.Fatal(err)
	}
	return addrs
}

// usedEvent is one used event buffer.
type usedEvent struct {
	head    uint16
	written uint32
}

// waitEvents waits for n used buffers on the event queue.
func (g *vmGuest) waitEvents(n int, within time.Duration) ([]usedEvent, error) {
	ctx, cancel := context.WithTimeout(g.ctx, within)
	defer cancel()
	q := g.vm.Queue(abi.QueueEvent)
	var out []usedEvent
	for len(out) < n {
		if h, w, ok := q.GetUsed(); ok {
			out = append(out, usedEvent{h, w})
			continue
		}
		if q.EnableInterrupts() {
			continue
		}
		if err := g.vm.WaitInterrupt(ctx, abi.QueueEvent); err != nil {
			return out, err
		}
	}
	return out, nil
}

// sharedFabric is a fabric for devices that must reach each other.
func sharedFabric() fabric.Fabric { return fabric.NewLocal() }

// memView is the device-side guest memory of the current connection.
func memView(t testing.TB, mem *guestmem.Table, gpa, n uint64) guestmem.View {
	t.Helper()
	v, err := mem.Translate(gpa, n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
