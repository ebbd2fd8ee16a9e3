package virtio

import (
	"reflect"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

// Test guest memory: three regions. r0 holds the rings, r1 (data) is
// adjacent to r0 in guest physical space so buffers crossing the boundary
// can be tested, r2 sits alone further up (indirect tables, and a region
// end followed by a hole).
const (
	r0Base = 0x000000
	r0Size = 0x100000
	r1Base = 0x100000
	r1Size = 0x040000
	r2Base = 0x400000
	r2Size = 0x010000
	hole   = 0x300000 // no region here
)

type env struct {
	maps  []*guestmem.Mapping
	mem   *guestmem.Table
	addrs RingAddrs
	size  uint16
}

// ringAddrsFor places a queue of size entries at the start of r0 (+0x1000).
func ringAddrsFor(size uint16) RingAddrs {
	d, a, _ := RingSizes(size)
	desc := uint64(r0Base + 0x1000)
	avail := desc + d
	used := (avail + a + 3) &^ 3
	return RingAddrs{Desc: desc, Avail: avail, Used: used}
}

func newEnv(tb testing.TB, size uint16) *env {
	tb.Helper()
	e := &env{size: size, addrs: ringAddrsFor(size)}
	var regions []guestmem.Region
	for i, r := range []struct{ base, size uint64 }{{r0Base, r0Size}, {r1Base, r1Size}, {r2Base, r2Size}} {
		m, err := guestmem.MapAnonymous(r.size)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { m.Unmap() })
		e.maps = append(e.maps, m)
		regions = append(regions, guestmem.Region{
			GuestPhys: r.base, Size: r.size, UserAddr: 0x7f0000000000 + uint64(i)<<32, Mapping: m,
		})
	}
	mem, err := guestmem.NewTable(regions)
	if err != nil {
		tb.Fatal(err)
	}
	e.mem = mem
	return e
}

// bytes returns guest memory at gpa as a slice (test-only convenience).
func (e *env) bytes(tb testing.TB, gpa, n uint64) []byte {
	tb.Helper()
	v, err := e.mem.Translate(gpa, n)
	if err != nil {
		tb.Fatal(err)
	}
	return v.Bytes()
}

func (e *env) pair(tb testing.TB, eventIdx bool) (*DriverQueue, *DeviceQueue) {
	tb.Helper()
	drv, err := NewDriverQueue(e.mem, e.size, e.addrs, eventIdx)
	if err != nil {
		tb.Fatal(err)
	}
	dev, err := NewDeviceQueue(e.mem, e.size, e.addrs, eventIdx)
	if err != nil {
		tb.Fatal(err)
	}
	return drv, dev
}

// inMemory reports whether v lies wholly inside one of the env's mappings,
// comparing host addresses (reflect gives them without unsafe).
func (e *env) inMemory(v guestmem.View) bool {
	if v.Len() == 0 {
		return false
	}
	p := reflect.ValueOf(v.Bytes()).Pointer()
	for _, m := range e.maps {
		b := m.View().Bytes()
		base := reflect.ValueOf(b).Pointer()
		if p >= base && p+uintptr(v.Len()) <= base+uintptr(len(b)) {
			return true
		}
	}
	return false
}

func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
}
