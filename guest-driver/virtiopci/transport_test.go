//go:build linux

package virtiopci

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// fakeBAR is BAR memory whose registers are plain memory: a read returns
// what was last written, which is enough for the driver's side of device
// initialisation (the same size for every queue, one feature word for
// both halves, FEATURES_OK reading back). Offered bit n is offered bit
// 32+n too, so bit 0 (SHMEM_DOORBELL) doubles as VERSION_1 and is always
// set.
type fakeBAR struct {
	m                         *guestmem.Mapping
	cc, notify, isr, cfg, shm guestmem.View
}

func newFakeBAR(t *testing.T, offered uint32, shm uint64, cfg []byte) *fakeBAR {
	t.Helper()
	m, err := guestmem.MapAnonymous(0x4000 + shm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	v := m.View()
	sub := func(off, n uint64) guestmem.View {
		s, err := v.Sub(off, n)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b := &fakeBAR{m: m, cc: sub(0, 0x1000), isr: sub(0x1000, 0x1000), cfg: sub(0x2000, 0x1000), notify: sub(0x3000, 0x1000)}
	if shm > 0 {
		b.shm = sub(0x4000, shm)
	}
	b.cc.PutUint16(ccNumQueues, abi.NumQueues)
	b.cc.PutUint16(ccQueueSize, 64)
	b.cc.PutUint32(ccDeviceFeature, offered|1)
	b.cfg.CopyIn(0, cfg)
	return b
}

// transport returns a polling transport over the fake BAR, with DMA
// memory from fake huge pages, initialised up to DRIVER_OK.
func (b *fakeBAR) transport(t *testing.T) *Transport {
	t.Helper()
	tr := &Transport{
		log: slog.New(slog.DiscardHandler), opts: Options{Poll: true}, poll: 50 * time.Microsecond,
		layout: Layout{NotifyMultiplier: 4},
		cc:     common{v: b.cc}, notify: b.notify, isr: b.isr, devcfg: b.cfg, shm: b.shm,
		dma:  newDMAPool(&fakeBacking{t: t, pas: linear}, 1),
		base: context.Background(),
	}
	t.Cleanup(func() { tr.dma.close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.initDevice(ctx); err != nil {
		t.Fatal(err)
	}
	return tr
}

// device is the device's end of the transport's queues, over the same
// DMA memory.
func device(t *testing.T, tr *Transport, i int) *virtio.DeviceQueue {
	t.Helper()
	mem, err := tr.dma.table()
	if err != nil {
		t.Fatal(err)
	}
	dq := tr.queues[i].dq
	q, err := virtio.NewDeviceQueue(mem, dq.Size(), dq.Addrs(), virtio.FeatureEventIdx.In(tr.features))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func validConfig(t *testing.T) []byte {
	l := abi.DefaultLimits
	db, err := abi.NewDoorbellLayout(l, 4096)
	if err != nil {
		t.Fatal(err)
	}
	b, err := abi.Config{ABIVersion: abi.ABIVersion, Limits: l, PhysPortCnt: 1, Doorbell: db}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInitDevice: the status ends at DRIVER_OK with every step's bit, the
// driver accepts VERSION_1 and EVENT_IDX but not the high bits it does
// not know, and SHMEM_DOORBELL only with a doorbell region large enough.
func TestInitDevice(t *testing.T) {
	offered := uint32(1<<abi.FeatureShmemDoorbell | 1<<abi.FeatureRC | 1<<virtio.FeatureEventIdx)
	cfg := validConfig(t)
	var c abi.Config
	c.UnmarshalBinary(cfg)
	for _, x := range []struct {
		name  string
		shm   uint64
		shmem bool
	}{{"no region", 0, false}, {"a small region", 4096, false}, {"a large enough region", c.Doorbell.Size(), true}} {
		tr := newFakeBAR(t, offered, x.shm, cfg).transport(t)
		want := virtio.FeatureVersion1.Mask() | virtio.FeatureEventIdx.Mask() | abi.FeatureRC.Mask()
		if x.shmem {
			want |= abi.FeatureShmemDoorbell.Mask()
		}
		if tr.features != want {
			t.Errorf("%s: features %#x, want %#x", x.name, tr.features, want)
		}
		if s := tr.cc.status(); s != virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK {
			t.Errorf("%s: status %v", x.name, s)
		}
		if len(tr.queues) != abi.NumQueues || tr.queues[0].dq.Size() != 64 {
			t.Errorf("%s: %d queues", x.name, len(tr.queues))
		}
		if v := tr.cc.v; v.MMIORead16(ccQueueEnable) != 1 || v.MMIORead16(ccQueueMSIXVector) != noVector {
			t.Errorf("%s: last queue not enabled without a vector", x.name)
		}
	}
	// A legacy-only device is refused and left FAILED.
	b := newFakeBAR(t, 0, 0, cfg)
	b.cc.PutUint32(ccDeviceFeature, 1<<abi.FeatureRC)
	tr := &Transport{log: slog.New(slog.DiscardHandler), cc: common{v: b.cc}, devcfg: b.cfg,
		dma: newDMAPool(&fakeBacking{t: t, pas: linear}, 1)}
	if err := tr.initDevice(context.Background()); err == nil || !tr.cc.status().Has(virtio.StatusFailed) {
		t.Errorf("no VERSION_1: %v, status %v", err, tr.cc.status())
	}
}

// serveControl answers each control request with its bytes reversed,
// until stop is closed; hold makes it keep the next chain unanswered
// until released.
func serveControl(t *testing.T, q *virtio.DeviceQueue, stop <-chan struct{}, hold <-chan chan struct{}) {
	for {
		c, ok, err := q.Pop()
		if err != nil {
			t.Error(err)
			return
		}
		if !ok {
			select {
			case <-stop:
				return
			case release := <-hold:
				<-release
			case <-time.After(20 * time.Microsecond):
			}
			continue
		}
		req := make([]byte, c.ReadableLen)
		c.ReadAll(req)
		resp := bytes.Clone(req)
		for i, j := 0, len(resp)-1; i < j; i, j = i+1, j-1 {
			resp[i], resp[j] = resp[j], resp[i]
		}
		q.Push(c.Head, c.WriteAll(resp))
	}
}

func TestCommand(t *testing.T) {
	b := newFakeBAR(t, 1<<virtio.FeatureEventIdx, 0, validConfig(t))
	tr := b.transport(t)
	dev := device(t, tr, abi.QueueControl)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { serveControl(t, dev, stop, nil) })
	defer func() { close(stop); wg.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 300 { // more than the queue size: descriptors come back
		req := []byte{byte(i), 2, 3, 4, 5}
		resp, err := tr.Command(ctx, req, 4)
		if err != nil {
			t.Fatal(err)
		}
		if want := []byte{5, 4, 3, 2}; !bytes.Equal(resp, want) {
			t.Fatalf("command %d: response % x, want % x", i, resp, want)
		}
	}
	// The first command kicked the control queue: its index, 0, at its
	// notify address; a wake-up writes 2 there (every queue of the fake
	// has notify offset 0).
	if err := tr.NotifyWakeup(); err != nil || b.notify.MMIORead16(0) != abi.QueueWakeup {
		t.Errorf("wake-up notification: %v, %d", err, b.notify.MMIORead16(0))
	}
	if _, err := tr.Command(ctx, nil, 4); err == nil {
		t.Error("empty request accepted")
	}
	if _, err := tr.Command(ctx, make([]byte, scratchSize), 1); err == nil {
		t.Error("oversized command accepted")
	}
}

// TestCommandGivenUp: a command whose caller gives up before the device
// answers is skipped when its completion arrives later, and its buffer
// is not reused, so the late response cannot land in a newer command's.
func TestCommandGivenUp(t *testing.T) {
	tr := newFakeBAR(t, 0, 0, validConfig(t)).transport(t)
	dev := device(t, tr, abi.QueueControl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := tr.Command(ctx, []byte{1, 2}, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered command: %v", err)
	}
	old := tr.queues[abi.QueueControl].scratch
	if old.Len() != 0 {
		t.Fatal("the given-up command's buffer is still the scratch buffer")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { serveControl(t, dev, stop, nil) })
	defer func() { close(stop); wg.Wait() }()
	resp, err := tr.Command(context.Background(), []byte{7, 8, 9}, 3)
	if err != nil || !bytes.Equal(resp, []byte{9, 8, 7}) {
		t.Fatalf("next command: % x, %v", resp, err)
	}
	if n := len(tr.queues[abi.QueueControl].abandoned); n != 0 {
		t.Errorf("%d abandoned heads left", n)
	}
}

// TestEvents: posted buffers count as outstanding, a buffer the device
// fills comes back as itself with the bytes written, and a TakeEvent and
// WaitEvents loop finds it.
func TestEvents(t *testing.T) {
	tr := newFakeBAR(t, 1<<virtio.FeatureEventIdx, 0, validConfig(t)).transport(t)
	dev := device(t, tr, abi.QueueEvent)
	var bufs []guestdriver.Buffer
	for range 4 {
		b, err := tr.AllocDMA(abi.EventSize, abi.EventSize)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if err := tr.PostEventBuffers(bufs...); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.PostedEventBuffers(); n != 4 || err != nil {
		t.Fatalf("posted %d, %v", n, err)
	}
	if _, _, ok, err := tr.TakeEvent(); ok || err != nil {
		t.Fatalf("an event before the device wrote one: %v", err)
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		c, ok, err := dev.Pop()
		if !ok || err != nil {
			t.Errorf("device pop: %v %v", ok, err)
			return
		}
		dev.Push(c.Head, c.WriteAll([]byte("event!")))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got guestdriver.Buffer
	var n uint32
	for {
		b, w, ok, err := tr.TakeEvent()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got, n = b, w
			break
		}
		if err := tr.WaitEvents(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got.GPA != bufs[0].GPA || n != 6 || string(got.Bytes()[:n]) != "event!" {
		t.Errorf("event buffer %#x (posted %#x), %d bytes %q", got.GPA, bufs[0].GPA, n, got.Bytes()[:n])
	}
	if n, _ := tr.PostedEventBuffers(); n != 3 {
		t.Errorf("%d posted after one came back", n)
	}
}

func TestReadConfigAndDoorbells(t *testing.T) {
	cfg := validConfig(t)
	b := newFakeBAR(t, 0, 0, cfg)
	tr := b.transport(t)
	got, err := tr.ReadConfig(context.Background())
	if err != nil || !bytes.Equal(got, cfg) {
		t.Fatalf("config % x, %v", got[:16], err)
	}
	if _, err := tr.Doorbells(); !errors.Is(err, guestdriver.ErrNoDoorbells) {
		t.Errorf("doorbells without a region: %v", err)
	}
	if _, _, ok := tr.DoorbellRegion(); ok {
		t.Error("a doorbell region without one")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.ReadConfig(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("config read after cancel: %v", err)
	}
}

// Close resets a device that is there, and only lets go of one that was
// hot-unplugged: its registers are gone (touching them would fault).
func TestCloseAfterUnplug(t *testing.T) {
	const addr = "0000:00:02.0"
	for _, unplugged := range []bool{false, true} {
		b := newFakeBAR(t, 0, 0, nil)
		tr := b.transport(t)
		root := fakeSysfs(t, map[string][2]string{addr: {"0x1af4", "0x106a"}}, addr)
		tr.dev = pciDev{sysfs: root, addr: addr}
		if unplugged {
			if err := os.RemoveAll(tr.dev.path()); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Close(); err != nil {
			t.Fatalf("unplugged %v: Close: %v", unplugged, err)
		}
		st := virtio.Status(b.cc.MMIORead8(ccDeviceStatus))
		if reset := st == 0; reset == unplugged {
			t.Errorf("unplugged %v: status %v after Close", unplugged, st)
		}
	}
}
