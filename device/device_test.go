package device

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
	"golang.org/x/sys/unix"
)

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no name":     {},
		"long name":   {Name: strings.Repeat("x", 201)},
		"huge limits": {Name: "d", Limits: abi.Limits{MaxQP: 1 << 30}},
		"no 4k pages": {Name: "d", Limits: abi.Limits{PageSizeCap: 1 << 21}},
	} {
		if d, err := New(cfg, quietLog()); err == nil {
			d.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	d, err := New(Config{Name: "nil-logger"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDeviceShape(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxQP: 10000}})
	if d.NumQueues() != 3 || d.MaxQueueSize() != abi.MaxQueueSize || d.ConfigSize() != 256 {
		t.Fatalf("queues %d max %d config %d", d.NumQueues(), d.MaxQueueSize(), d.ConfigSize())
	}
	f := d.Features()
	for _, bit := range []virtio.Feature{virtio.FeatureVersion1, virtio.FeatureEventIdx, virtio.FeatureIndirectDesc} {
		if !bit.In(f) {
			t.Errorf("%v not offered", bit)
		}
	}
	for _, bit := range []abi.Feature{abi.FeatureShmemDoorbell, abi.FeatureEventQueue, abi.FeatureRC,
		abi.FeatureAtomic, abi.FeatureInline, abi.FeatureIdleWakeup, abi.FeatureCQNotify, abi.FeatureResizeCQ} {
		if !bit.In(f) {
			t.Errorf("%v not offered", bit)
		}
	}
	if abi.FeatureUD.In(f) {
		t.Error("UD offered: CREATE_QP refuses UD QPs")
	}
	const deviceBits = 1<<(abi.LastDeviceFeature+1) - 1
	if got, want := f&deviceBits, abi.FeatureMask(abi.FeatureShmemDoorbell, abi.FeatureEventQueue, abi.FeatureRC,
		abi.FeatureAtomic, abi.FeatureInline, abi.FeatureIdleWakeup, abi.FeatureCQNotify, abi.FeatureResizeCQ); got != want {
		t.Errorf("device bits %s, want %s", abi.FeatureString(got), abi.FeatureString(want))
	}
	sh := d.ShmemRegions()
	if len(sh) != 1 || sh[0] != d.DoorbellLayout().Size() || sh[0]%guestmem.PageSize() != 0 {
		t.Fatalf("shmem regions %v", sh)
	}
	if d.DoorbellLayout().Records != 10000+abi.DefaultLimits.MaxCQ+abi.DefaultLimits.MaxSRQ {
		t.Errorf("doorbell records %d", d.DoorbellLayout().Records)
	}
	if d.Limits().MaxQP != 10000 || d.Limits().MaxCQ != abi.DefaultLimits.MaxCQ {
		t.Errorf("limits %+v", d.Limits())
	}
	if g := d.NodeGUID(); g>>56&0x03 != 0x02 || g == newDevice(t, Config{Name: "other"}).NodeGUID() {
		t.Errorf("node GUID %#x", g)
	}
}

func readConfig(t *testing.T, d *Device) abi.Config {
	t.Helper()
	b := make([]byte, abi.ConfigSize)
	d.ReadConfig(0, b)
	var c abi.Config
	if err := c.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigSpace(t *testing.T) {
	d := newDevice(t, Config{})
	c := readConfig(t, d)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.ABIVersion != abi.ABIVersion || c.Status != 0 || c.NodeGUID != d.NodeGUID() ||
		c.Limits != abi.DefaultLimits || c.PhysPortCnt != 1 || c.Doorbell != d.DoorbellLayout() {
		t.Fatalf("config %+v", c)
	}
	// Partial reads at any offset agree with the whole.
	whole := make([]byte, abi.ConfigSize)
	d.ReadConfig(0, whole)
	for _, r := range []struct{ off, n uint32 }{{0x20, 4}, {0x4c, 1}, {0x4e, 2}, {0xf8, 8}, {0x07, 13}} {
		part := bytes.Repeat([]byte{0xaa}, int(r.n))
		d.ReadConfig(r.off, part)
		if !bytes.Equal(part, whole[r.off:r.off+r.n]) {
			t.Errorf("read %d at %#x: %x", r.n, r.off, part)
		}
	}
	// Out of range reads zeros instead of panicking.
	out := []byte{1, 2, 3}
	d.ReadConfig(1<<31, out)
	if !bytes.Equal(out, []byte{0, 0, 0}) {
		t.Errorf("out-of-range read %x", out)
	}
	for _, off := range []uint32{0, abi.ConfigOffStatus, abi.ConfigOffMaxQP, abi.ConfigOffReserved} {
		if err := d.WriteConfig(off, []byte{1, 0, 0, 0}); !errors.Is(err, ErrReadOnlyConfig) {
			t.Errorf("write at %#x: %v", off, err)
		}
	}
	if readConfig(t, d) != c {
		t.Error("config changed by rejected writes")
	}
	if d.Stats().ConfigWrites != 4 {
		t.Errorf("config writes %d", d.Stats().ConfigWrites)
	}
}

func TestActivateShmem(t *testing.T) {
	d := newDevice(t, Config{})
	env := activate(t, d, allFeatures(d))
	if len(env.mappings) != 1 {
		t.Fatalf("mappings %+v", env.mappings)
	}
	m := env.mappings[0]
	if m.ShmID != 0 || m.ShmOffset != 0 || m.FdOffset != 0 || m.Len != d.DoorbellLayout().Size() || !m.Writable {
		t.Fatalf("mapping %+v", m)
	}
	if d.DoorbellMode() != DoorbellShmem || readConfig(t, d).Status != abi.ConfigStatusDoorbellShmem {
		t.Fatalf("mode %v status %#x", d.DoorbellMode(), readConfig(t, d).Status)
	}
	// The fd handed over is the region: what the guest writes through its
	// mapping, the daemon sees.
	gm, err := guestmem.MapOwn(env.fds[0], 0, m.Len)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Unmap()
	rec, _ := d.DoorbellLayout().RecordOffset(5)
	gm.View().StoreUint32Release(rec, 77)
	if got := d.DoorbellRegion().View().LoadUint32Acquire(rec); got != 77 {
		t.Fatalf("daemon sees %d", got)
	}
	if err := d.Activate(context.Background(), env); !errors.Is(err, ErrAlreadyActive) {
		t.Fatalf("second Activate: %v", err)
	}
	// Disconnect keeps state; reset drops it.
	d.Deactivate(false)
	if d.DoorbellMode() != DoorbellNone || readConfig(t, d).Status != 0 {
		t.Fatal("still live after Deactivate")
	}
	if d.DoorbellRegion().View().Uint32(rec) != 77 {
		t.Fatal("Deactivate(false) dropped doorbell state")
	}
	activate(t, d, allFeatures(d))
	d.Deactivate(true)
	if gm.View().Uint32(rec) != 0 {
		t.Fatal("reset left doorbell state behind")
	}
	s := d.Stats()
	if s.Activations != 2 || s.Resets != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestActivateFallback(t *testing.T) {
	d := newDevice(t, Config{})
	// The driver did not ack SHMEM_DOORBELL: no map is attempted.
	env := activate(t, d, virtio.FeatureVersion1.Mask())
	if len(env.mappings) != 0 || d.DoorbellMode() != DoorbellGuestRAM ||
		readConfig(t, d).Status != abi.ConfigStatusDoorbellGuestRAM {
		t.Fatalf("mappings %v mode %v", env.mappings, d.DoorbellMode())
	}
	d.Deactivate(true)
	// Acked, but the front-end cannot map (no SHMEM protocol feature).
	env = &fakeEnv{acked: allFeatures(d), mapErr: errors.New("SHMEM not negotiated")}
	if err := d.Activate(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if d.DoorbellMode() != DoorbellGuestRAM || readConfig(t, d).Status != abi.ConfigStatusDoorbellGuestRAM {
		t.Fatalf("mode %v", d.DoorbellMode())
	}
}

func TestDevicesHaveSeparateDoorbells(t *testing.T) {
	a, b := newDevice(t, Config{Name: "a"}), newDevice(t, Config{Name: "b"})
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a.DoorbellRegion().Fd(), &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b.DoorbellRegion().Fd(), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Ino == sb.Ino {
		t.Fatal("two devices share a doorbell file")
	}
}

func TestClose(t *testing.T) {
	d, err := New(Config{Name: "closing"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	activate(t, d, allFeatures(d))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Activate(context.Background(), &fakeEnv{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Activate after Close: %v", err)
	}
	d.Deactivate(true) // must not panic
	if d.DoorbellRegion().Fd() != -1 {
		t.Fatal("doorbell fd still open")
	}
}
