package vhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/virtio"
)

// QEMU's generic device (vhost-user-test-device-pci) never sends
// DRIVER_OK, and serves the back-end channel only when it is not waiting
// for a reply of ours. The device must go live on the rings' start
// without stalling a single front-end request, and must know its own
// shared memory when QEMU reports it back as guest memory.
func TestActivatesOnRingStartWithoutStallingTheFrontEnd(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{Name: "t"})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	hold := make(chan struct{})
	g.chMu.Lock()
	g.chHold = hold
	g.chMu.Unlock()

	began := time.Now()
	g.startRings(16)
	if d := time.Since(began); d > time.Second {
		t.Fatalf("start sequence took %v: a request waited for the back-end channel", d)
	}
	if acts, _, _, _ := dev.snapshot(); acts != 0 {
		t.Fatalf("device activated before its SHMEM_MAP was acknowledged")
	}

	// QEMU maps the file as RAM once it reads SHMEM_MAP, and reports the
	// BAR as a memory region.
	wait.For(t, "SHMEM_MAP on the back-end channel", func() bool {
		reqs, _ := g.channelRequests()
		return len(reqs) == 1
	})
	slots := memory(b).Len()
	shmBAR := [4]uint64{0xfe00_0000, 4096, 0x7f10_0000_0000, 0}
	s.fe.mustAck(uint32(ReqAddMemReg), singleRegion(shmBAR), dev.shm)
	if n := memory(b).Len(); n != slots {
		t.Fatalf("shared memory BAR entered the memory table (%d regions, was %d)", n, slots)
	}
	if b.Stats().ShmemEchoes.Load() != 1 {
		t.Fatal("echo of the shared memory file not counted")
	}
	if _, err := memory(b).Translate(shmBAR[0], 8); err == nil {
		t.Fatal("the doorbell BAR translates as guest memory")
	}

	close(hold) // QEMU's main loop runs: SHMEM_MAP is acknowledged
	if got := g.request(0, []byte("live")); !bytes.Equal(got, []byte("live")) {
		t.Fatalf("echo %q", got)
	}
	if acts, _, _, mapErr := dev.snapshot(); acts != 1 || mapErr != nil {
		t.Fatalf("activations %d, SHMEM_MAP error %v", acts, mapErr)
	}
	if b.Stats().Activations.Load() != 1 {
		t.Fatalf("activations counted %d", b.Stats().Activations.Load())
	}
	// The region goes away the same way; guest RAM is untouched.
	s.fe.mustAck(uint32(ReqRemMemReg), singleRegion(shmBAR))
	if n := memory(b).Len(); n != slots {
		t.Fatalf("REM_MEM_REG of the BAR changed the memory table to %d regions", n)
	}
	// Another memfd is guest RAM as usual.
	s.fe.mustAck(uint32(ReqAddMemReg), singleRegion([4]uint64{8 << 30, regionSize, uvaBase + 8*regionSize, 0}), g.memfd)
	if n := memory(b).Len(); n != slots+1 {
		t.Fatalf("guest RAM region not added (%d regions)", n)
	}
}

// A stop or reset while the activation waits for the front-end must not
// wait for the front-end in turn: it cancels the activation.
func TestResetCancelsPendingActivation(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	hold := make(chan struct{})
	defer close(hold)
	g.chMu.Lock()
	g.chHold = hold
	g.chMu.Unlock()
	g.startRings(16)

	began := time.Now()
	s.fe.mustAck(uint32(ReqResetDevice), nil)
	if d := time.Since(began); d > time.Second {
		t.Fatalf("RESET_DEVICE took %v behind a pending activation", d)
	}
	acts, deact, _, mapErr := dev.snapshot()
	if acts != 1 || !errors.Is(mapErr, context.Canceled) || len(deact) != 1 || !deact[0] {
		t.Fatalf("activations %d (map error %v), deactivations %v: want the cancelled activation undone by a reset", acts, mapErr, deact)
	}
}

// memory is the memory table of the connection b serves.
func memory(b *Backend) *guestmem.Table {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur.mem.Load()
}

// QEMU keeps a shared-memory mapping across back-end reconnects, and
// reports it in the memory table: the device must not map
// it again (QEMU would stack a second mapping on the first).
func TestReportedMappingIsNotMadeAgain(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	s.fe.mustAck(uint32(ReqSetFeatures), u64(virtio.FeatureMask(virtio.FeatureVersion1, virtio.FeatureEventIdx)|1<<30))
	shmBAR := [4]uint64{0xfe00_0000, 4096, 0x7f10_0000_0000, 0}
	regions := append(g.regions(), shmBAR)
	s.fe.mustAck(uint32(ReqSetMemTable), memTable(regions...), g.memfd, g.memfd, dev.shm)
	if n := memory(b).Len(); n != 2 {
		t.Fatalf("memory table has %d regions, want guest RAM's 2", n)
	}
	for i := range 2 {
		g.setupQueue(uint32(i), 16)
	}
	if got := g.request(0, []byte("mapped")); !bytes.Equal(got, []byte("mapped")) {
		t.Fatalf("echo %q", got)
	}
	if reqs, _ := g.channelRequests(); len(reqs) != 0 {
		t.Fatalf("back-end channel saw %v for a mapping the front-end reported", reqs)
	}
}

// A restarted daemon's doorbell file has the name of the one QEMU still
// maps: that mapping is removed before the new one is made.
func TestEarlierIncarnationIsUnmapped(t *testing.T) {
	dev := newEchoDevice(t)
	old, err := unix.MemfdCreate("vstellar-test:echo-shm", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(old)
	unix.Ftruncate(old, 4096)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	s.fe.mustAck(uint32(ReqSetFeatures), u64(virtio.FeatureMask(virtio.FeatureVersion1, virtio.FeatureEventIdx)|1<<30))
	s.fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	s.fe.mustAck(uint32(ReqAddMemReg), singleRegion([4]uint64{0xfe00_0000, 4096, 0x7f10_0000_0000, 0}), old)
	if n := memory(b).Len(); n != 2 {
		t.Fatalf("an earlier incarnation's doorbells entered the memory table (%d regions)", n)
	}
	for i := range 2 {
		g.setupQueue(uint32(i), 16)
	}
	g.request(0, []byte("x"))
	reqs, _ := g.channelRequests()
	if !slices.Equal(reqs, []uint32{uint32(BackendShmemUnmap), uint32(BackendShmemMap)}) {
		t.Fatalf("back-end channel saw %v, want SHMEM_UNMAP then SHMEM_MAP", reqs)
	}
}

// QEMU stops the generic device (VM stop, guest reset) with GET_VRING_BASE
// on every ring and no SET_STATUS: the last ring's stop suspends the
// device, and the rings' next start resumes it.
func TestRingsStopAndStartTheDevice(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.startRings(16)
	g.request(0, []byte("a"))
	s.fe.call(uint32(ReqGetVringBase), state(0, 0))
	if _, deact, _, _ := dev.snapshot(); len(deact) != 0 {
		t.Fatalf("deactivated %v with a ring still running", deact)
	}
	s.fe.call(uint32(ReqGetVringBase), state(1, 0))
	if _, deact, _, _ := dev.snapshot(); !slices.Equal(deact, []bool{false}) {
		t.Fatalf("deactivations %v after the last ring stopped, want one without reset", deact)
	}
	g.qs, g.kick, g.call, g.errfd = nil, nil, nil, nil
	for i := range 2 {
		g.setupQueue(uint32(i), 16)
	}
	if got := g.request(1, []byte{0x0f}); !bytes.Equal(got, []byte{0xf0}) {
		t.Fatalf("after restart: %x", got)
	}
	if acts, _, _, _ := dev.snapshot(); acts != 2 {
		t.Fatalf("activations %d, want 2", acts)
	}
}

// QEMU forwards no guest reset: a rebooted guest's driver (or a new
// QEMU's) starts every ring at index 0, and the device must drop the
// previous driver's state before it goes live again, while a VM resumed
// after a pause (rings restarted where they stopped) keeps it.
func TestNewDriverDropsTheOldState(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.startRings(16)
	g.request(0, []byte("a"))
	g.request(1, []byte("b"))
	stop := func() (bases [2]uint32) {
		for i := range 2 {
			bases[i] = binary.LittleEndian.Uint32(s.fe.call(uint32(ReqGetVringBase), state(uint32(i), 0))[4:])
		}
		return bases
	}
	resume := func(bases [2]uint32) {
		for i := range 2 {
			s.fe.mustAck(uint32(ReqSetVringBase), state(uint32(i), bases[i]))
			k := eventfd(t)
			g.kick[i] = k
			s.fe.mustAck(uint32(ReqSetVringKick), u64(uint64(i)), k)
			s.fe.mustAck(uint32(ReqSetVringCall), u64(uint64(i)), g.call[i])
		}
	}
	// A pause: the rings resume where they stopped; nothing is dropped.
	resume(stop())
	g.request(0, []byte("c"))
	if _, deact, _, _ := dev.snapshot(); !slices.Equal(deact, []bool{false}) {
		t.Fatalf("deactivations %v after a pause, want one suspend", deact)
	}
	// A reboot: new rings from index 0; the old state goes first.
	stop()
	g.qs, g.kick, g.call, g.errfd = nil, nil, nil, nil
	for i := range 2 {
		g.setupQueue(uint32(i), 16)
	}
	g.request(0, []byte("d"))
	if acts, deact, _, _ := dev.snapshot(); acts != 3 || !slices.Equal(deact, []bool{false, false, true}) {
		t.Fatalf("activations %d, deactivations %v after a reboot: want the old state dropped (true) before the third activation", acts, deact)
	}
}
