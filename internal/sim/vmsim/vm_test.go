package vmsim

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/testkit/wait"
)

// Request codes as literals, so these expectations restate QEMU's order
// independently of package frontend.
const (
	getFeatures         = 1
	setFeatures         = 2
	setOwner            = 3
	setMemTable         = 5
	setVringNum         = 8
	setVringAddr        = 9
	setVringBase        = 10
	getVringBase        = 11
	setVringKick        = 12
	setVringCall        = 13
	setVringErr         = 14
	getProtocolFeatures = 15
	setProtocolFeatures = 16
	getQueueNum         = 17
	setVringEnable      = 18
	setBackendReqFD     = 21
	getConfig           = 24
	getMaxMemSlots      = 36
	addMemReg           = 37
	setStatusReq        = 39
	remMemReg           = 38
	getStatus           = 40
	getShmemConfig      = 44
)

func connectOrder(nq int) []uint32 {
	o := []uint32{getFeatures, getProtocolFeatures, setProtocolFeatures, getQueueNum, getMaxMemSlots,
		setBackendReqFD, setOwner, getFeatures}
	for range nq {
		o = append(o, setVringCall, setVringErr)
	}
	return append(o, getShmemConfig)
}

// startOrder is vub_start: SET_FEATURES, FEATURES_OK (SET_STATUS only if
// the back-end's status lacks it), the memory table, the rings, their
// enables and their call notifiers unmasked. No DRIVER_OK.
func startOrder(nq int, setStatus bool, mem ...uint32) []uint32 {
	o := []uint32{setFeatures, getStatus}
	if setStatus {
		o = append(o, setStatusReq)
	}
	o = append(o, mem...)
	for range nq {
		o = append(o, setVringNum, setVringBase, setVringAddr, setVringKick, setVringCall)
	}
	for range nq {
		o = append(o, setVringEnable)
	}
	for range nq {
		o = append(o, setVringCall)
	}
	return o
}

// stopOrder is vub_stop: no SET_STATUS.
func stopOrder(nq int) []uint32 {
	var o []uint32
	for range nq {
		o = append(o, setVringEnable)
	}
	for range nq {
		o = append(o, getVringBase)
	}
	return o
}

// checkOrder waits until the back-end has logged as many requests as want
// (requests without a reply, like SET_STATUS, may still be in flight), then
// compares and clears the log.
func (b *fakeBackend) checkOrder(t *testing.T, what string, want []uint32) {
	t.Helper()
	for range 200 {
		b.mu.Lock()
		n := len(b.log)
		b.mu.Unlock()
		if n >= len(want) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // and nothing more arrives
	got := b.take()
	if !slices.Equal(got, want) {
		t.Errorf("%s order\n got %v\nwant %v", what, got, want)
	}
}

func newVM(t *testing.T, be *fakeBackend, cfg Config) *VM {
	t.Helper()
	cfg.SocketPath = be.path
	if cfg.MemSize == 0 {
		cfg.MemSize = 64 << 20
	}
	if cfg.NumQueues == 0 {
		cfg.NumQueues = 2
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 64
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLifecycleOrder(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 2)
	vm := newVM(t, be, Config{ConfigSize: 16})
	be.checkOrder(t, "connect", connectOrder(2))

	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "DRIVER_OK", startOrder(2, true, addMemReg))
	if got := vm.AckedFeatures(); got != 1<<32|1<<29|1<<28|1<<0 {
		t.Errorf("acked %#x", got)
	}
	be.mu.Lock()
	status := be.status
	be.mu.Unlock()
	if status != 0x8 { // QEMU: GET_STATUS/SET_STATUS(s|FEATURES_OK), and never DRIVER_OK
		t.Errorf("back-end status %#x after start, want 0x8", status)
	}

	for i, msg := range []string{"hello", "vstellar", "x"} {
		got, err := vm.Request(ctx, 0, []byte(msg), 64)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if string(got) != strings.ToUpper(msg) {
			t.Errorf("request %d: %q", i, got)
		}
	}
	cfg, err := vm.ReadConfig(ctx)
	if err != nil || string(cfg) != "cfg!cfg!cfg!cfg!" {
		t.Errorf("config %q, %v", cfg, err)
	}
	be.take()

	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "stop", stopOrder(2))
	if avail, known := vm.LastAvail(0); avail != 3 || !known {
		t.Errorf("last avail %d (from GET_VRING_BASE: %v), want 3", avail, known)
	}
	// Restart without reset resumes at the remembered index.
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// FEATURES_OK is set already, the memory table is unchanged.
	be.checkOrder(t, "restart", startOrder(2, false))
	if b := be.base(0); b != 3 {
		t.Errorf("SET_VRING_BASE %d after restart, want 3", b)
	}
	if got, err := vm.Request(ctx, 0, []byte("again"), 8); err != nil || string(got) != "AGAIN" {
		t.Errorf("request after restart: %q, %v", got, err)
	}
	be.take()
	// Reset: stop, then a fresh driver start at index 0.
	if err := vm.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "reset", stopOrder(2))
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	be.take()
	if b := be.base(0); b != 0 {
		t.Errorf("SET_VRING_BASE %d after reset, want 0", b)
	}
	if got, err := vm.Request(ctx, 0, []byte("fresh"), 8); err != nil || string(got) != "FRESH" {
		t.Errorf("request after reset: %q, %v", got, err)
	}
}

// QEMU sends the memory table as ADD_MEM_REG when CONFIGURE_MEM_SLOTS is
// negotiated, only what the back-end lacks; as SET_MEM_TABLE, at every
// start, when it is not.
func TestMemoryTable(t *testing.T) {
	for _, c := range []struct {
		name           string
		proto          uint64
		first, restart []uint32
	}{
		{"add_mem_reg", 0, []uint32{addMemReg, addMemReg}, nil},
		{"set_mem_table", frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoConfigureMemSlots),
			[]uint32{setMemTable}, []uint32{setMemTable}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctx10(t)
			be := newFakeBackend(t, 1)
			vm := newVM(t, be, Config{NumQueues: 1, MemSize: 3 << 30, ProtocolFeatures: c.proto})
			be.take()
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			be.checkOrder(t, "DRIVER_OK", startOrder(1, true, c.first...))
			if _, err := vm.Request(ctx, 0, []byte("abc"), 3); err != nil {
				t.Fatal(err)
			}
			be.take()
			if err := vm.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			be.checkOrder(t, "stop", stopOrder(1))
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			be.checkOrder(t, "restart", startOrder(1, false, c.restart...))
		})
	}
}

func TestLargeVMLayout(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1, MemSize: 3 << 30})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rs := be.memRegions()
	if len(rs) != 2 {
		t.Fatalf("back-end got %d regions", len(rs))
	}
	base := vm.Regions()[0].UserAddr
	want := []fakeRegion{
		{GPA: 0, Size: 2 << 30, UVA: base, Off: 0},
		{GPA: 4 << 30, Size: 1 << 30, UVA: base + 2<<30, Off: 2 << 30},
	}
	for i := range want {
		got := rs[i]
		got.m = nil
		if got != want[i] {
			t.Errorf("region %d: %+v, want %+v", i, got, want[i])
		}
	}
	// Bytes the back-end writes at GPA 4 GiB + 1 MiB appear there in the
	// guest, and the guest's bytes at GPA 1 GiB in the back-end.
	rs[1].m.View().PutUint64(1<<20, 0xfeedface)
	v, err := vm.Memory().Translate(4<<30+1<<20, 8)
	if err != nil || v.Uint64(0) != 0xfeedface {
		t.Errorf("high RAM mismatch: %v", err)
	}
	g, _ := vm.Memory().Translate(1<<30, 8)
	g.PutUint64(0, 0x1234)
	if rs[0].m.View().Uint64(1<<30) != 0x1234 {
		t.Error("low RAM mismatch")
	}
	if _, err := vm.Memory().Translate(3<<30, 8); err == nil {
		t.Error("GPA 3 GiB (the PCI hole) translates")
	}
	if got, err := vm.Request(ctx, 0, []byte("big"), 3); err != nil || string(got) != "BIG" {
		t.Errorf("request: %q %v", got, err)
	}
}

func rss(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * guestmem.PageSize()
}

func TestHugeVMIsCheap(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	before := rss(t)
	start := time.Now()
	vm := newVM(t, be, Config{NumQueues: 1, MemSize: 16 << 30})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	grown := int64(rss(t)) - int64(before)
	t.Logf("16 GiB VM up in %v, RSS +%d KiB", elapsed, grown>>10)
	if elapsed > 2*time.Second {
		t.Errorf("16 GiB VM took %v", elapsed)
	}
	if grown > 8<<20 {
		t.Errorf("RSS grew by %d MiB", grown>>20)
	}
	if len(be.memRegions()) != 2 || be.memRegions()[1].Size != 14<<30 {
		t.Errorf("regions %+v", be.memRegions())
	}
}

func TestReconnect(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := vm.Request(ctx, 0, []byte("a"), 1); err != nil {
			t.Fatal(err)
		}
	}
	// The back-end dies without answering GET_VRING_BASE.
	be.drop()
	be.take()
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if avail, known := vm.LastAvail(0); avail != 3 || known {
		t.Errorf("last avail %d known %v, want used idx 3", avail, known)
	}
	be.checkOrder(t, "reconnect", append(connectOrder(1), startOrder(1, true, addMemReg)...))
	if b := be.base(0); b != 3 {
		t.Errorf("SET_VRING_BASE %d, want 3", b)
	}
	if got, err := vm.Request(ctx, 0, []byte("after"), 5); err != nil || string(got) != "AFTER" {
		t.Errorf("request after reconnect: %q %v", got, err)
	}
	// A clean stop, then reconnect: the GET_VRING_BASE answer is used, and
	// since the guest had DRIVER_OK the device is started again.
	be.take()
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "stop", stopOrder(1))
	if avail, known := vm.LastAvail(0); avail != 4 || !known {
		t.Errorf("last avail %d known %v, want 4 from GET_VRING_BASE", avail, known)
	}
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "reconnect after stop", append(connectOrder(1), startOrder(1, true, addMemReg)...))
	if b := be.base(0); b != 4 {
		t.Errorf("SET_VRING_BASE %d, want 4", b)
	}
}

func TestShmemAndConfigChange(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "connect and start", append(connectOrder(1), startOrder(1, true, addMemReg)...))
	ps := guestmem.PageSize()
	mfd, err := unix.MemfdCreate("doorbell", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	unix.Ftruncate(mfd, int64(ps))
	host, err := guestmem.MapOwn(mfd, 0, ps)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Unmap()
	ch := be.channel()
	mm := frontend.ShmemMapping{ShmID: 0, ShmOffset: ps, Len: ps, Flags: frontend.ShmemMapRW}.Encode()
	if err := fakeWrite(ch, 9, 0x9, mm, []int{mfd}); err != nil {
		t.Fatal(err)
	}
	r, err := fakeRead(ch)
	if err != nil || r.req != 9 || r.flags != 0x5 || ne.Uint64(r.p) != 0 {
		t.Fatalf("SHMEM_MAP reply %+v %v", r, err)
	}
	host.View().PutUint32(0, 0xd00b)
	v, err := vm.ShmemMapped(0, ps, ps)
	if err != nil || v.LoadUint32Acquire(0) != 0xd00b {
		t.Errorf("guest view of the doorbell page: %v", err)
	}
	// As QEMU, after its acknowledgement: the mapping is guest memory
	// now, the BAR's page at its guest physical address, backed by the
	// back-end's file.
	be.checkOrder(t, "after SHMEM_MAP", []uint32{addMemReg})
	bar := fakeRegion{GPA: barBase(64<<20) + ps, Size: ps, UVA: vm.ShmemSpace().Files()[0].Addr, Off: 0}
	if rs := be.memRegions(); len(rs) != 2 || rs[1].GPA != bar.GPA || rs[1].Size != bar.Size || rs[1].UVA != bar.UVA {
		t.Errorf("back-end's regions %+v, want the BAR page %+v last", rs, bar)
	} else if rs[1].m.View().Uint32(0) != 0xd00b {
		t.Error("the region reported for the BAR is not the back-end's file")
	}
	if vm.Shmem(0).Len() != 64<<10 {
		t.Errorf("region 0 is %d bytes", vm.Shmem(0).Len())
	}
	if err := fakeWrite(ch, 2, 0x1, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-vm.ConfigChanges():
	case <-time.After(2 * time.Second):
		t.Error("no config change")
	}
	be.take()
	if err := vm.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.ShmemMapped(0, ps, ps); err == nil {
		t.Error("mapping survived reset")
	}
	be.checkOrder(t, "reset", stopOrder(1))
	// The next start takes the BAR's page out of the back-end's table.
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	be.checkOrder(t, "start after reset", startOrder(1, false, remMemReg))
}

// A back-end request waits while the VMM waits for a reply, as QEMU
// serves the back-end channel from its main loop: a back-end that waits
// for its acknowledgement before it answers a request of the VMM's
// deadlocks (here, until the request's context ends).
func TestBackendChannelWaitsForTheMainLoop(t *testing.T) {
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1, ConfigSize: 16})
	ch := be.channel()
	be.hold.Lock() // the fake back-end will not answer GET_CONFIG yet
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := vm.ReadConfig(ctx)
		done <- err
	}()
	wait.For(t, "GET_CONFIG to be sent", func() bool { return slices.Contains(be.take(), getConfig) })
	if err := fakeWrite(ch, 2, 0x9, nil, nil); err != nil { // CONFIG_CHANGE_MSG, NEED_REPLY
		t.Fatal(err)
	}
	ch.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if r, err := fakeRead(ch); err == nil {
		t.Fatalf("back-end request answered while the VMM waited for GET_CONFIG: %+v", r)
	}
	ch.SetReadDeadline(time.Time{})
	if err := <-done; err == nil {
		t.Fatal("GET_CONFIG succeeded without an answer")
	}
	be.hold.Unlock()
	// The VMM gave up on its request (its connection is broken now):
	// the main loop is free, and the back-end's request is served.
	r, err := fakeRead(ch)
	if err != nil || r.req != 2 || ne.Uint64(r.p) != 0 {
		t.Fatalf("CONFIG_CHANGE_MSG reply %+v %v", r, err)
	}
	select {
	case <-vm.ConfigChanges():
	case <-time.After(2 * time.Second):
		t.Error("no config change")
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 2)
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	before := fds()
	cfg := Config{SocketPath: be.path, MemSize: 3 << 30, NumQueues: 2, QueueSize: 64}
	vm, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Request(ctx, 1, []byte("q1"), 2); err != nil {
		t.Fatal(err)
	}
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	vm.Close()
	vm.Close()
	be.drop() // the fake back-end lets go of what it received
	wait.For(t, "fds to return to the baseline", func() bool { return fds() == before })
}

func TestBadConfig(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	for _, cfg := range []Config{
		{SocketPath: be.path, MemSize: 64 << 20, NumQueues: 0, QueueSize: 64},
		{SocketPath: be.path, MemSize: 64 << 20, NumQueues: 1, QueueSize: 48},
		{SocketPath: be.path, MemSize: 12345, NumQueues: 1, QueueSize: 64},
		{SocketPath: be.path, MemSize: 64 << 20, NumQueues: 4, QueueSize: 64}, // back-end has 1
		{SocketPath: be.path + ".missing", MemSize: 64 << 20, NumQueues: 1, QueueSize: 64},
	} {
		if vm, err := New(ctx, cfg); err == nil {
			vm.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// A reconnect that fails (back-end still gone) leaves the VM without a
// connection; the next attempt, as QEMU's reconnect timer makes, must
// work, and Start in between must fail cleanly.
func TestReconnectAfterFailedReconnect(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	be.drop()
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := vm.Reconnect(dead); err == nil {
		t.Fatal("reconnect with a cancelled context succeeded")
	}
	if err := vm.Start(ctx); err == nil {
		t.Fatal("Start without a connection succeeded")
	}
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := vm.Request(ctx, 0, []byte("again"), 5); err != nil || string(got) != "AGAIN" {
		t.Errorf("request after the second reconnect: %q %v", got, err)
	}
}

// A wait cut short by its context must not leave the call fd with an
// expired deadline that fails the next wait at once.
func TestWaitInterruptAfterCancelledWait(t *testing.T) {
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1})
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if err := vm.WaitInterrupt(dead, 0); err == nil {
		t.Fatal("wait with a cancelled context succeeded")
	}
	if _, err := unix.Write(vm.queues[0].callFD, u64(1)); err != nil {
		t.Fatal(err)
	}
	if err := vm.WaitInterrupt(context.Background(), 0); err != nil {
		t.Fatalf("wait with a pending interrupt: %v", err)
	}
}
