package guestdriver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/fabric"
	. "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// rig is one daemon-side device served by a real vhost.Backend and one
// simulated VM connected to it: the whole control path, end to end.
type rig struct {
	dev *device.Device
	vm  *vmsim.VM
	drv *Device
}

func startRig(t *testing.T, name string, mut func(*vmsim.Config)) *rig {
	t.Helper()
	return startRigOn(t, name, nil, mut)
}

// testLog discards, unless VSTELLAR_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("VSTELLAR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startRigOn starts a rig whose device joins fab (nil: a private one).
func startRigOn(t *testing.T, name string, fab fabric.Fabric, mut func(*vmsim.Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	log := testLog()
	dev, err := device.New(device.Config{Name: name, Fabric: fab}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	sock := filepath.Join(t.TempDir(), name+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	b := vhost.NewBackend(dev, vhost.Options{Name: name, Logger: log})
	served := make(chan error, 1)
	go func() {
		conn, err := ln.AcceptUnix()
		ln.Close()
		if err != nil {
			served <- err
			return
		}
		served <- b.Serve(ctx, conn)
	}()
	cfg := vmsim.Config{
		SocketPath: sock,
		MemSize:    16 << 20,
		NumQueues:  dev.NumQueues(),
		QueueSize:  abi.DefaultQueueSize,
		ConfigSize: dev.ConfigSize(),
	}
	if mut != nil {
		mut(&cfg)
	}
	vm, err := vmsim.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Error("backend did not stop after the VM closed")
		}
	})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	drv, err := Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() }) // before the VM goes
	return &rig{dev: dev, vm: vm, drv: drv}
}

func TestVMQueryDevice(t *testing.T) {
	r := startRig(t, "vm0", nil)
	ctx := context.Background()
	if r.drv.Config().NodeGUID != r.dev.NodeGUID() || r.drv.Limits() != r.dev.Limits() {
		t.Fatalf("config %+v", r.drv.Config())
	}
	a, err := r.drv.QueryDevice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.NodeGUID != r.dev.NodeGUID() || a.MaxQP != abi.DefaultLimits.MaxQP || a.VendorPartID != abi.PCIDeviceID || a.PhysPortCnt != 1 {
		t.Fatalf("attr %+v", a)
	}
	// Malformed commands get a status, and the queue keeps working.
	for _, op := range []abi.Opcode{abi.OpCreateQP, abi.OpRegMR, abi.OpAllocPD} {
		if _, err := r.drv.CommandForTest(ctx, op, make([]byte, 17), 16); !errors.Is(err, abi.StatusInvalidArgument) {
			t.Errorf("%v: %v", op, err)
		}
	}
	if _, err := r.drv.CommandForTest(ctx, 999, nil, 0); !errors.Is(err, abi.StatusInvalidOpcode) {
		t.Errorf("opcode 999: %v", err)
	}
	if _, err := r.drv.QueryDevice(ctx); err != nil {
		t.Fatal(err)
	}
	// 6 commands above and Open's RESET_STATE and QUERY_GID.
	if s := r.dev.Stats(); s.Commands != 8 || s.ByStatus[abi.StatusOK] != 4 {
		t.Errorf("device stats %+v", s)
	}
}

func TestVMDoorbellsShared(t *testing.T) {
	r := startRig(t, "vm1", nil)
	if r.drv.Config().Status != abi.ConfigStatusDoorbellShmem || r.dev.DoorbellMode() != device.DoorbellShmem {
		t.Fatalf("status %#x mode %v", r.drv.Config().Status, r.dev.DoorbellMode())
	}
	db, err := r.drv.Doorbells()
	if err != nil {
		t.Fatal(err)
	}
	layout := r.drv.Config().Doorbell
	if db.Len() != layout.Size() {
		t.Fatalf("doorbell view %d bytes, layout %d", db.Len(), layout.Size())
	}
	// The guest rings QP 3's doorbell; the daemon's engine would see it.
	off, _ := layout.RecordOffset(3)
	db.StoreUint32Release(off, 0x1234)
	if got := r.dev.DoorbellRegion().View().LoadUint32Acquire(off); got != 0x1234 {
		t.Fatalf("daemon sees %#x", got)
	}
}

func TestVMDoorbellsIsolatedBetweenDevices(t *testing.T) {
	a, b := startRig(t, "vma", nil), startRig(t, "vmb", nil)
	dba, err := a.drv.Doorbells()
	if err != nil {
		t.Fatal(err)
	}
	for i := range dba.Bytes() {
		dba.Bytes()[i] = 0xff
	}
	// Device b's engine writes its own device page (the idle flag); the
	// records are untouched and no flag but EngineIdle is set.
	bv := b.dev.DoorbellRegion().View()
	layout := b.drv.Config().Doorbell
	for i, x := range bv.Bytes()[layout.RecordsOffset:] {
		if x != 0 {
			t.Fatalf("VM a's doorbell writes reached device b's records at byte %d", i)
		}
	}
	if f := bv.LoadUint32Acquire(abi.DevPageOffEngineFlags); f&^abi.EngineIdle != 0 {
		t.Fatalf("device b's engine flags %#x", f)
	}
}

func TestVMFallbackWithoutShmemProtocol(t *testing.T) {
	r := startRig(t, "vm2", func(c *vmsim.Config) {
		c.ProtocolFeatures = frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoShmem)
	})
	if r.drv.Config().Status != abi.ConfigStatusDoorbellGuestRAM || r.dev.DoorbellMode() != device.DoorbellGuestRAM {
		t.Fatalf("status %#x mode %v", r.drv.Config().Status, r.dev.DoorbellMode())
	}
	if _, err := r.drv.Doorbells(); !errors.Is(err, ErrNoDoorbells) {
		t.Fatalf("Doorbells: %v", err)
	}
	if _, err := r.drv.QueryDevice(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestVMFallbackWithoutFeature(t *testing.T) {
	r := startRig(t, "vm3", func(c *vmsim.Config) {
		c.DeviceFeatures = vmsim.DefaultDriverFeatures &^ abi.FeatureShmemDoorbell.Mask()
	})
	if r.drv.Config().Status != abi.ConfigStatusDoorbellGuestRAM {
		t.Fatalf("status %#x", r.drv.Config().Status)
	}
}

// TestVMReopenKeepsEventQueue: Open and Close ten times on one VM. Each
// Open succeeds (the event queue of 256 would be full after four Opens
// that each added 64 buffers), the queue holds eventBuffers buffers, and
// the last Device still gets its events.
func TestVMReopenKeepsEventQueue(t *testing.T) {
	r := startRig(t, "reopen", nil)
	ctx := testCtx(t)
	tr := vmsim.NewTransport(r.vm)
	d := r.drv
	for i := range 10 {
		d.Close()
		var err error
		if d, err = Open(ctx, tr); err != nil {
			t.Fatalf("Open %d: %v", i+2, err)
		}
		if n, err := tr.PostedEventBuffers(); err != nil || n != EventBuffersForTest {
			t.Fatalf("Open %d: %d event buffers posted (%v), want %d", i+2, n, err, EventBuffersForTest)
		}
	}
	defer d.Close()
	// A CQ notification: a receive on a QP in ERR is flushed, and the
	// flush completion fires the armed CQ.
	pd, err := d.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ctx, QPInit{SendCQ: cq, RecvCQ: cq, Cap: QPCap{SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(ctx, abi.QPAttrState, abi.QPAttr{State: abi.QPStateErr}); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(RecvWR{WRID: 5}); err != nil {
		t.Fatal(err)
	}
	if err := cq.Wait(ctx); err != nil {
		t.Fatalf("no CQ notification after ten reopens: %v", err)
	}
	checkWC(t, pollOne(t, cq), 5, abi.WCRecv, abi.WCWRFlushErr)
}
