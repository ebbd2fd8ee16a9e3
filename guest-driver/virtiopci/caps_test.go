//go:build linux

package virtiopci

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

func realConfig(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/qemu-11.1.3-q35-config.bin")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseRealConfigSpace: the config space of QEMU 11.1.3's
// vhost-user-test-device-pci (virtio id 41 as a stand-in, q35), dumped
// in a guest: virtio structures in BAR 2, the doorbell region in BAR 4.
func TestParseRealConfigSpace(t *testing.T) {
	l, err := ParseLayout(realConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{
		Vendor: 0x1af4, Device: 0x1040 + 41,
		Common:           Window{BAR: 2, Offset: 0, Length: 0x1000},
		ISR:              Window{BAR: 2, Offset: 0x1000, Length: 0x1000},
		DeviceCfg:        Window{BAR: 2, Offset: 0x2000, Length: 0x1000},
		Notify:           Window{BAR: 2, Offset: 0x3000, Length: 0x1000},
		NotifyMultiplier: 4,
		MSIX:             true,
	}
	want.Shm = []ShmRegion{{ID: 0, Window: Window{BAR: 4, Offset: 0, Length: 1 << 20}}}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("layout\n%+v, want\n%+v", l, want)
	}
	if r, ok := l.ShmRegion(0); !ok || r.BAR != 4 {
		t.Errorf("ShmRegion(0) = %+v, %v", r, ok)
	}
	if _, ok := l.ShmRegion(1); ok {
		t.Error("ShmRegion(1) found")
	}
	var sizes [6]uint64
	sizes[2], sizes[4] = 0x4000, 1<<20
	if err := l.CheckBARs(sizes); err != nil {
		t.Error(err)
	}
	sizes[4] = 1 << 19
	if err := l.CheckBARs(sizes); !errors.Is(err, ErrBadConfigSpace) {
		t.Errorf("region beyond its BAR: %v", err)
	}
}

// capAt writes a virtio capability at p linking to next.
func capAt(b []byte, p, next, length, typ, bar int, off, n uint32) {
	b[p], b[p+1], b[p+2], b[p+3], b[p+4] = pciCapIDVendor, byte(next), byte(length), byte(typ), byte(bar)
	le32(b[p+8:], off)
	le32(b[p+12:], n)
}

func le32(b []byte, x uint32) { b[0], b[1], b[2], b[3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24) }

// synthetic builds a config space with the four required capabilities
// at 0x40.. and lets mod change it.
func synthetic(mod func(b []byte)) []byte {
	b := make([]byte, 256)
	b[pciStatus] = pciStatusCapList
	b[pciCapPointer] = 0x40
	capAt(b, 0x40, 0x50, 16, capCommon, 0, 0, 0x38)
	capAt(b, 0x50, 0x64, 20, capNotify, 0, 0x1000, 0x100)
	le32(b[0x50+16:], 2)
	capAt(b, 0x64, 0x74, 16, capISR, 0, 0x2000, 1)
	capAt(b, 0x74, 0, 16, capDevice, 0, 0x3000, 0x100)
	if mod != nil {
		mod(b)
	}
	return b
}

func TestParseLayoutCases(t *testing.T) {
	if l, err := ParseLayout(synthetic(nil)); err != nil || l.NotifyMultiplier != 2 || l.ISR.Offset != 0x2000 || len(l.Shm) != 0 {
		t.Fatalf("base case: %+v %v", l, err)
	}
	good := []struct {
		name  string
		mod   func(b []byte)
		check func(l Layout) bool
	}{
		{"a 64-bit shared memory region", func(b []byte) {
			b[0x74+1] = 0x84
			capAt(b, 0x84, 0, 24, capSharedMemory, 4, 0x1000, 0x2000)
			b[0x84+5] = 7
			le32(b[0x84+16:], 1) // offset_hi
			le32(b[0x84+20:], 2) // length_hi
		}, func(l Layout) bool {
			return len(l.Shm) == 1 && l.Shm[0] == ShmRegion{ID: 7, Window: Window{BAR: 4, Offset: 1<<32 | 0x1000, Length: 2<<32 | 0x2000}}
		}},
		{"the first of two common capabilities", func(b []byte) {
			b[0x74+1] = 0x84
			capAt(b, 0x84, 0, 16, capCommon, 1, 0x5000, 0x40)
		}, func(l Layout) bool { return l.Common.BAR == 0 && l.Common.Offset == 0 }},
		{"other capabilities skipped", func(b []byte) {
			b[pciCapPointer] = 0x90
			b[0x90], b[0x91] = 0x05, 0xa0 // MSI
			b[0xa0], b[0xa1] = pciCapIDMSIX, 0x40
		}, func(l Layout) bool { return l.MSIX }},
		{"a vendor capability of an unknown type", func(b []byte) {
			b[0x74+1] = 0x84
			capAt(b, 0x84, 0, 16, 9, 9, 0, 0) // VENDOR_CFG, BAR not checked
		}, func(l Layout) bool { return true }},
		{"low pointer bits ignored", func(b []byte) { b[pciCapPointer] = 0x43 }, func(l Layout) bool { return l.Common.Length == 0x38 }},
	}
	for _, c := range good {
		l, err := ParseLayout(synthetic(c.mod))
		if err != nil || !c.check(l) {
			t.Errorf("%s: %+v, %v", c.name, l, err)
		}
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"short", synthetic(nil)[:255]},
		{"no capability list", synthetic(func(b []byte) { b[pciStatus] = 0 })},
		{"a loop", synthetic(func(b []byte) { b[0x74+1] = 0x40 })},
		{"a pointer into the header", synthetic(func(b []byte) { b[0x64+1] = 0x20 })},
		{"a capability in the last word", synthetic(func(b []byte) {
			b[0x74+1] = 0xfe // low bits ignored: 0xfc
			b[0xfc], b[0xfe], b[0xff] = pciCapIDVendor, 16, capDevice
		})},
		{"no common", synthetic(func(b []byte) { b[0x40+3] = 0x77 })},
		{"no device", synthetic(func(b []byte) { b[0x64+1] = 0 })},
		{"a short common", synthetic(func(b []byte) { le32(b[0x40+12:], 0x20) })},
		{"a short virtio capability", synthetic(func(b []byte) { b[0x40+2] = 12 })},
		{"a notify without multiplier", synthetic(func(b []byte) { b[0x50+2] = 16 })},
		{"a BAR beyond 5", synthetic(func(b []byte) { b[0x64+4] = 6 })},
		{"a capability past the end", synthetic(func(b []byte) {
			b[0x74+1] = 0xf8
			b[0xf8], b[0xfa], b[0xfb] = pciCapIDVendor, 16, capISR
		})},
		{"a wrapping shared memory region", synthetic(func(b []byte) {
			b[0x74+1] = 0x84
			capAt(b, 0x84, 0, 24, capSharedMemory, 4, 0, 1)
			le32(b[0x84+16:], 0xffffffff)
			le32(b[0x84+20:], 0xffffffff)
		})},
		{"a short shared memory capability", synthetic(func(b []byte) {
			b[0x74+1] = 0x84
			capAt(b, 0x84, 0, 20, capSharedMemory, 4, 0, 1)
		})},
	}
	for _, c := range bad {
		l, err := ParseLayout(c.b)
		t.Logf("%s: %v", c.name, err)
		if !errors.Is(err, ErrBadConfigSpace) {
			t.Errorf("%s: %+v, %v", c.name, l, err)
		}
	}
}
