package device

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

func request(op abi.Opcode, payload ...byte) []byte { return abi.AppendRequest(nil, op, payload) }

const attrResp = abi.ResponseHeaderSize + abi.DeviceAttrSize

func TestQueryDevice(t *testing.T) {
	for _, eventIdx := range []bool{false, true} {
		d := newDevice(t, Config{Limits: abi.Limits{MaxQP: 10000, MaxSGE: 8}})
		activate(t, d, allFeatures(d))
		g := newGuest(t, eventIdx)
		resp := g.command(d, request(abi.OpQueryDevice), 512)
		if len(resp) != attrResp {
			t.Fatalf("wrote %d bytes, want %d", len(resp), attrResp)
		}
		st, payload, err := abi.DecodeResponse(resp)
		if err != nil || st != abi.StatusOK {
			t.Fatalf("status %v err %v", st, err)
		}
		var a abi.DeviceAttr
		if err := a.UnmarshalBinary(payload); err != nil {
			t.Fatal(err)
		}
		want := abi.DeviceAttr{
			FWVersion: abi.FWVersion(0, 1, 0), NodeGUID: d.NodeGUID(), SysImageGUID: d.NodeGUID(),
			MaxMRSize: abi.DefaultLimits.MaxMRSize, PageSizeCap: abi.DefaultLimits.PageSizeCap,
			VendorID: 0x1af4, VendorPartID: 0x106a, HWVer: abi.ABIVersion,
			MaxQP: 10000, MaxQPWR: abi.DefaultLimits.MaxQPWR, MaxSGE: 8, MaxSGERd: 8,
			MaxCQ: abi.DefaultLimits.MaxCQ, MaxCQE: abi.DefaultLimits.MaxCQE, MaxMR: abi.DefaultLimits.MaxMR,
			MaxPD: abi.DefaultLimits.MaxPD, MaxQPRdAtom: abi.DefaultLimits.MaxQPRdAtom,
			MaxQPInitRdAtom: abi.DefaultLimits.MaxQPRdAtom, MaxAH: abi.DefaultLimits.MaxAH,
			MaxInlineData: abi.DefaultLimits.MaxInlineData, AtomicCap: abi.AtomicGlob,
			DeviceCapFlags: abi.DevCapResizeCQ | abi.DevCapRCRNRNAKGen | abi.DevCapOnDemandPinning,
			PhysPortCnt:    1, LocalCAAckDelay: 15,
			MaxSRQ: abi.DefaultLimits.MaxSRQ, MaxSRQWR: abi.DefaultLimits.MaxSRQWR, MaxSRQSGE: abi.DefaultLimits.MaxSRQSGE,
		}
		if a != want {
			t.Fatalf("attr\n got %+v\nwant %+v", a, want)
		}
		s := d.Stats()
		if s.Commands != 1 || s.Failed != 0 || s.ByOpcode[abi.OpQueryDevice] != 1 || s.ByStatus[abi.StatusOK] != 1 {
			t.Errorf("stats %+v", s)
		}
	}
}

// TestScatteredChain splits the request and the response over several
// descriptors, the way a driver with fragmented buffers would.
func TestScatteredChain(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, true)
	req := request(abi.OpQueryDevice)
	r1, r2 := g.put(req[:3]), g.put(req[3:])
	w1, w2, w3 := g.alloc(5), g.alloc(100), g.alloc(200)
	head := g.submit([]virtio.Buffer{r1, {Addr: r2.Addr, Len: 0}, r2}, []virtio.Buffer{w1, w2, w3})
	if err := g.process(d); err != nil {
		t.Fatal(err)
	}
	h, n := g.used()
	if h != head || n != attrResp {
		t.Fatalf("head %d written %d", h, n)
	}
	resp := append(append(append([]byte(nil), g.bytes(w1.Addr, 5)...), g.bytes(w2.Addr, 100)...), g.bytes(w3.Addr, 200)...)
	if st, _, _ := abi.DecodeResponse(resp[:n]); st != abi.StatusOK {
		t.Fatalf("status %v", st)
	}
	if resp[n] != 0xee {
		t.Fatal("device wrote past its response")
	}
}

func TestControlErrors(t *testing.T) {
	oversized := append(request(abi.OpQueryDevice), make([]byte, abi.MaxRequestSize)...)
	for _, c := range []struct {
		name    string
		req     []byte
		respLen uint32
		status  abi.Status // checked when written > 0
		written uint32
	}{
		{"unknown opcode", request(99), 64, abi.StatusInvalidOpcode, 8},
		{"opcode zero", request(0), 64, abi.StatusInvalidOpcode, 8},
		{"flags set", []byte{1, 0, 0, 0, 1, 0, 0, 0}, 64, abi.StatusInvalidArgument, 8},
		{"short header", []byte{1, 0, 0}, 64, abi.StatusInvalidArgument, 8},
		{"no readable part", nil, 64, abi.StatusInvalidArgument, 8},
		{"trailing payload", request(abi.OpQueryDevice, 0), 512, abi.StatusInvalidArgument, 8},
		{"oversized request", oversized, 512, abi.StatusInvalidArgument, 8},
		{"response too small", request(abi.OpQueryDevice), attrResp - 1, abi.StatusResponseTooSmall, 8},
		{"header-only response", request(abi.OpQueryDevice), 8, abi.StatusResponseTooSmall, 8},
		{"no room for status", request(abi.OpQueryDevice), 7, 0, 0},
		{"no writable part", request(abi.OpQueryDevice), 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDevice(t, Config{})
			activate(t, d, allFeatures(d))
			g := newGuest(t, false)
			resp := g.command(d, c.req, c.respLen)
			if uint32(len(resp)) != c.written {
				t.Fatalf("written %d, want %d", len(resp), c.written)
			}
			if c.written > 0 {
				st, payload, err := abi.DecodeResponse(resp)
				if err != nil || st != c.status || len(payload) != 0 {
					t.Fatalf("status %v payload %d err %v, want %v", st, len(payload), err, c.status)
				}
			}
			s := d.Stats()
			if s.Commands != 1 || (c.written == 0) != (s.Dropped == 1) {
				t.Errorf("stats %+v", s)
			}
			// The device is still fine: the next command works.
			resp = g.command(d, request(abi.OpQueryDevice), attrResp)
			if st, _, _ := abi.DecodeResponse(resp); st != abi.StatusOK || len(resp) != attrResp {
				t.Fatalf("follow-up QUERY_DEVICE: %v, %d bytes", st, len(resp))
			}
		})
	}
}

// TestEveryOpcodeImplemented sends every opcode with a zeroed payload of
// the right size: each is executed (a zeroed request names no object and
// sets no size, so it fails with a status of its own), none is
// NOT_SUPPORTED or INVALID_OPCODE.
func TestEveryOpcodeImplemented(t *testing.T) {
	d := newDevice(t, Config{})
	g := newGuest(t, true)
	activateOn(t, d, allFeatures(d), g.mem)
	for _, op := range abi.Opcodes() {
		n, _ := op.RequestSize()
		resp := g.command(d, request(op, make([]byte, n)...), 512)
		st, _, err := abi.DecodeResponse(resp)
		if err != nil || st == abi.StatusNotSupported || st == abi.StatusInvalidOpcode {
			t.Errorf("%v: status %v, %v", op, st, err)
		}
	}
	if s := d.Stats(); s.ByStatus[abi.StatusNotSupported] != 0 || s.ByOpcode[abi.OpCreateQP] != 1 || s.Commands != uint64(len(abi.Opcodes())) {
		t.Errorf("stats %+v", s)
	}
}

// RESET_STATE drops what a previous driver left: the doorbell records are
// zero afterwards, and a request with a payload is refused.
func TestResetState(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, true)
	db := d.DoorbellRegion().View()
	recs := uint64(d.DoorbellLayout().RecordsOffset)
	db.PutUint64(recs, 0xdead)
	resp := g.command(d, request(abi.OpResetState), 64)
	if st, body, err := abi.DecodeResponse(resp); err != nil || st != abi.StatusOK || len(body) != 0 {
		t.Fatalf("RESET_STATE: %v %x %v", st, body, err)
	}
	// The device page is the restarted engine's: it may already have set
	// EngineIdle on its way to sleep. Nothing else in it is the driver's.
	if f := db.LoadUint32Acquire(abi.DevPageOffEngineFlags); f&^abi.EngineIdle != 0 {
		t.Fatalf("engine_flags %#x after RESET_STATE", f)
	}
	for i, b := range db.Bytes()[recs:] {
		if b != 0 {
			t.Fatalf("doorbell byte %d = %#x after RESET_STATE", recs+uint64(i), b)
		}
	}
	if d.Stats().Resets != 1 {
		t.Fatalf("resets %d", d.Stats().Resets)
	}
	resp = g.command(d, request(abi.OpResetState, 1, 2, 3, 4), 64)
	if st, _, _ := abi.DecodeResponse(resp); st != abi.StatusInvalidArgument {
		t.Fatalf("RESET_STATE with a payload: %v", st)
	}
}

func TestBatch(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, true)
	var resps []virtio.Buffer
	for i := range 20 {
		op := abi.OpQueryDevice
		if i%3 == 1 {
			op = abi.OpAllocPD
		}
		w := g.alloc(attrResp)
		resps = append(resps, w)
		if _, err := g.drv.Add([]virtio.Buffer{g.put(request(op))}, []virtio.Buffer{w}); err != nil {
			t.Fatal(err)
		}
	}
	g.drv.Publish()
	if err := g.process(d); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		g.used()
	}
	if _, _, ok := g.drv.GetUsed(); ok {
		t.Fatal("more completions than requests")
	}
	if s := d.Stats(); s.Commands != 20 || s.ByStatus[abi.StatusOK] != 20 || s.ByOpcode[abi.OpAllocPD] != 7 {
		t.Fatalf("stats %+v", s)
	}
	if n := d.Objects().PDs; n != 7 {
		t.Fatalf("%d PDs after 7 ALLOC_PD", n)
	}
}

func TestBadChainBreaksQueue(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, false)
	// Publish an avail index (avail->idx, offset 2) far ahead of anything
	// the driver added.
	g.bytes(g.drv.Addrs().Avail+2, 2)[0] = queueSize + 5
	err := g.process(d)
	if !errors.Is(err, virtio.ErrBadChain) {
		t.Fatalf("ProcessQueue = %v, want ErrBadChain", err)
	}
	if d.Stats().BadChains != 1 {
		t.Errorf("stats %+v", d.Stats())
	}
}

func TestBadDescriptorAddress(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, false)
	g.submit([]virtio.Buffer{{Addr: 1 << 40, Len: 8}}, []virtio.Buffer{g.alloc(64)})
	if err := g.process(d); !errors.Is(err, virtio.ErrBadChain) {
		t.Fatalf("ProcessQueue = %v, want ErrBadChain", err)
	}
}

func TestOtherQueuesConsumeNothing(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	for _, idx := range []int{abi.QueueEvent, abi.QueueWakeup} {
		g := newGuest(t, true)
		g.submit(nil, []virtio.Buffer{g.alloc(64)})
		if err := d.ProcessQueue(context.Background(), idx, g.devq, g.mem); err != nil {
			t.Fatal(err)
		}
		if !g.devq.Pending() {
			t.Errorf("queue %d consumed a buffer", idx)
		}
	}
	g := newGuest(t, true)
	if err := d.ProcessQueue(context.Background(), 3, g.devq, g.mem); !errors.Is(err, ErrNoSuchQueue) {
		t.Errorf("queue 3: %v", err)
	}
}

func TestInactiveDeviceLeavesRing(t *testing.T) {
	d := newDevice(t, Config{})
	g := newGuest(t, true)
	g.submit([]virtio.Buffer{g.put(request(abi.OpQueryDevice))}, []virtio.Buffer{g.alloc(attrResp)})
	if err := g.process(d); err != nil {
		t.Fatal(err)
	}
	if !g.devq.Pending() || d.Stats().Commands != 0 {
		t.Fatal("inactive device processed a command")
	}
	activate(t, d, allFeatures(d))
	if err := g.process(d); err != nil {
		t.Fatal(err)
	}
	if _, n := g.used(); n != attrResp {
		t.Fatalf("written %d", n)
	}
	// A cancelled context stops between chains, leaving the rest queued.
	g.submit([]virtio.Buffer{g.put(request(abi.OpQueryDevice))}, []virtio.Buffer{g.alloc(attrResp)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.ProcessQueue(ctx, abi.QueueControl, g.devq, g.mem); err != nil {
		t.Fatal(err)
	}
	if !g.devq.Pending() {
		t.Fatal("cancelled ProcessQueue consumed a chain")
	}
}

// TestConcurrentUse runs the control queue while config space and the
// stats are read, for the race detector, then deactivates the device.
func TestConcurrentUse(t *testing.T) {
	d := newDevice(t, Config{})
	activate(t, d, allFeatures(d))
	g := newGuest(t, true)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, abi.ConfigSize)
		for {
			select {
			case <-stop:
				return
			default:
				d.ReadConfig(0, buf)
				_ = d.Stats()
			}
		}
	}()
	for range 200 {
		g.command(d, request(abi.OpQueryDevice), attrResp)
	}
	close(stop)
	wg.Wait()
	d.Deactivate(true)
	if d.Stats().Commands != 200 {
		t.Fatalf("commands %d", d.Stats().Commands)
	}
}
