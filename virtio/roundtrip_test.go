package virtio

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

func TestRingSizes(t *testing.T) {
	for _, tc := range []struct {
		size              uint16
		desc, avail, used uint64
	}{
		{1, 16, 8, 14},
		{256, 4096, 518, 2054},
		{32768, 524288, 65542, 262150},
	} {
		d, a, u := RingSizes(tc.size)
		if d != tc.desc || a != tc.avail || u != tc.used {
			t.Errorf("RingSizes(%d) = %d,%d,%d want %d,%d,%d", tc.size, d, a, u, tc.desc, tc.avail, tc.used)
		}
	}
	// The inflight region must hold the 16-byte header plus the states.
	for _, n := range []uint16{1, 2, 3, 4, 5, 128, 1024, 32768} {
		if got := InflightQueueSize(n); got < 16+16*uint64(n) || got%64 != 0 {
			t.Errorf("InflightQueueSize(%d) = %d", n, got)
		}
	}
	if got := InflightQueueSize(256); got != 4160 {
		t.Errorf("InflightQueueSize(256) = %d, want 4160 (libvhost-user)", got)
	}
}

func TestFeaturesAndStatus(t *testing.T) {
	m := FeatureMask(FeatureVersion1, FeatureEventIdx, FeatureIndirectDesc)
	if m != 1<<32|1<<29|1<<28 {
		t.Fatalf("mask %#x", m)
	}
	if !FeatureEventIdx.In(m) || FeatureRingPacked.In(m) || Feature(64).Mask() != 0 || Feature(70).In(^uint64(0)) {
		t.Fatal("In/Mask wrong")
	}
	if FeatureRingReset != 40 || FeatureNotificationData != 38 || FeatureAccessPlatform != 33 {
		t.Fatal("feature numbers")
	}
	if s := (StatusAcknowledge | StatusDriver | StatusDriverOK | 16).String(); s != "ACKNOWLEDGE|DRIVER|DRIVER_OK|0x10" {
		t.Fatalf("status string %q", s)
	}
	if Status(0).String() != "RESET" || StatusFailed.String() != "FAILED" {
		t.Fatal("status string")
	}
	if FeatureEventIdx.String() != "EVENT_IDX" || Feature(5).String() != "bit5" {
		t.Fatal("feature string")
	}
}

func TestNeedEventRule(t *testing.T) {
	// The spec's example: used_event 0 -> notify after the first buffer,
	// and again after the 65536th.
	cases := []struct {
		ev, cur, old uint16
		want         bool
	}{
		{0, 1, 0, true},
		{0, 2, 1, false},
		{5, 6, 0, true},
		{5, 5, 0, false},
		{0xffff, 0x0001, 0xfffe, true}, // across the wrap
		{0x0000, 0x0001, 0xfffe, true},
		{0x0001, 0x0001, 0xfffe, false},
		{3, 3, 3, false},
	}
	for _, c := range cases {
		if got := deviceNeedEvent(c.ev, c.cur, c.old); got != c.want {
			t.Errorf("deviceNeedEvent(%d,%d,%d)=%v", c.ev, c.cur, c.old, got)
		}
	}
}

func TestNewQueueRejectsBadRings(t *testing.T) {
	e := newEnv(t, 8)
	good := e.addrs
	cases := []struct {
		name  string
		size  uint16
		addrs RingAddrs
		oor   bool // expect guestmem.ErrOutOfRange too
	}{
		{"size 0", 0, good, false},
		{"size 3", 3, good, false},
		{"size 65535", 65535, good, false},
		{"desc misaligned", 8, RingAddrs{good.Desc + 8, good.Avail, good.Used}, false},
		{"avail odd", 8, RingAddrs{good.Desc, good.Avail + 1, good.Used}, false},
		{"used 2-aligned", 8, RingAddrs{good.Desc, good.Avail, good.Used + 2}, false},
		{"desc in hole", 8, RingAddrs{hole, good.Avail, good.Used}, true},
		{"used crosses region end", 8, RingAddrs{good.Desc, good.Avail, r2Base + r2Size - 8}, true},
		{"avail crosses adjacent regions", 8, RingAddrs{good.Desc, r1Base - 8, good.Used}, true},
		{"desc at top of address space", 8, RingAddrs{^uint64(0) &^ 15, good.Avail, good.Used}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewDeviceQueue(e.mem, c.size, c.addrs, false)
			if !errors.Is(err, ErrBadRing) || c.oor != errors.Is(err, guestmem.ErrOutOfRange) {
				t.Fatalf("device: %v", err)
			}
			_, err = NewDriverQueue(e.mem, c.size, c.addrs, false)
			if !errors.Is(err, ErrBadRing) {
				t.Fatalf("driver: %v", err)
			}
			// SetMemory keeps the old views on failure.
			q, err := NewDeviceQueue(e.mem, 8, good, false)
			if err != nil {
				t.Fatal(err)
			}
			empty, _ := guestmem.NewTable(nil)
			if err := q.SetMemory(empty); !errors.Is(err, ErrBadRing) {
				t.Fatalf("SetMemory(empty): %v", err)
			}
			if _, ok, err := q.Pop(); ok || err != nil {
				t.Fatalf("pop after failed SetMemory: %v %v", ok, err)
			}
		})
	}
}

// req describes one request: readable and writable buffer sizes.
type req struct {
	r, w     []uint32
	indirect bool
}

// alloc hands out data buffers in r1 from a bump pointer.
type alloc struct{ next uint64 }

func (a *alloc) get(n uint32) Buffer {
	if a.next == 0 || a.next+uint64(n) > r1Base+r1Size {
		a.next = r1Base
	}
	b := Buffer{Addr: a.next, Len: n}
	a.next += (uint64(n) + 7) &^ 7
	return b
}

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		req  req
	}{
		{"one readable", req{r: []uint32{64}}},
		{"one writable", req{w: []uint32{64}}},
		{"mixed", req{r: []uint32{16, 100, 3}, w: []uint32{7, 4000}}},
		{"zero-length descriptor", req{r: []uint32{0, 10}, w: []uint32{0, 5}}},
		{"indirect mixed", req{r: []uint32{16, 32}, w: []uint32{8, 8, 200}, indirect: true}},
		{"indirect writable only", req{w: []uint32{4096}, indirect: true}},
	}
	for _, eventIdx := range []bool{false, true} {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, 8)
				drv, dev := e.pair(t, eventIdx)
				roundTrip(t, e, drv, dev, &alloc{}, c.req, 1)
			})
		}
	}
}

// roundTrip runs one request from driver to device and back and checks
// every byte.
func roundTrip(t testing.TB, e *env, drv *DriverQueue, dev *DeviceQueue, a *alloc, rq req, seed byte) {
	t.Helper()
	var rb, wb []Buffer
	var want []byte
	var rlen, wlen uint32
	for _, n := range rq.r {
		b := a.get(n)
		p := e.bytes(t, b.Addr, uint64(n)+1)[:n]
		pattern(p, seed)
		seed++
		want = append(want, p...)
		rb = append(rb, b)
		rlen += n
	}
	for _, n := range rq.w {
		b := a.get(n)
		clear(e.bytes(t, b.Addr, uint64(n)+1)[:n])
		wb = append(wb, b)
		wlen += n
	}
	var head uint16
	var err error
	if rq.indirect {
		head, err = drv.AddIndirect(r2Base+uint64(seed)%64*256, rb, wb)
	} else {
		head, err = drv.Add(rb, wb)
	}
	if err != nil {
		t.Fatal(err)
	}
	drv.Publish()
	c, ok, err := dev.Pop()
	if err != nil || !ok {
		t.Fatalf("pop: %v %v", ok, err)
	}
	if c.Head != head || c.ReadableLen != rlen || c.WritableLen != wlen {
		t.Fatalf("chain head %d r %d w %d, want %d %d %d", c.Head, c.ReadableLen, c.WritableLen, head, rlen, wlen)
	}
	got := make([]byte, rlen+5)
	if n := c.ReadAll(got); n != int(rlen) || !bytes.Equal(got[:n], want) {
		t.Fatalf("ReadAll %d bytes, mismatch", n)
	}
	if rlen > 3 {
		part := make([]byte, 2)
		if c.CopyOut(part, uint64(rlen-3)); !bytes.Equal(part, want[rlen-3:rlen-1]) {
			t.Fatal("CopyOut at offset")
		}
	}
	resp := make([]byte, wlen)
	pattern(resp, seed+100)
	n := c.WriteAll(resp)
	if n != wlen {
		t.Fatalf("WriteAll wrote %d of %d", n, wlen)
	}
	dev.Push(c.Head, n)
	h, written, ok := drv.GetUsed()
	if !ok || h != head || written != wlen {
		t.Fatalf("GetUsed %d %d %v, want %d %d", h, written, ok, head, wlen)
	}
	var back []byte
	for _, b := range wb {
		back = append(back, e.bytes(t, b.Addr, uint64(b.Len)+1)[:b.Len]...)
	}
	if !bytes.Equal(back, resp) {
		t.Fatal("writable buffers do not hold the device's response")
	}
	// Byte after each writable buffer untouched.
	for _, b := range wb {
		if e.bytes(t, b.Addr+uint64(b.Len), 1)[0] != 0 && b.Len%8 != 0 {
			t.Fatal("device wrote past a writable buffer")
		}
	}
}

// TestWrapAround pushes more than 65536 requests through a 4-entry queue
// in random batches, so both 16-bit indices wrap several times.
func TestWrapAround(t *testing.T) {
	for _, eventIdx := range []bool{false, true} {
		e := newEnv(t, 4)
		drv, dev := e.pair(t, eventIdx)
		rng := rand.New(rand.NewPCG(1, 2))
		a := &alloc{}
		const total = 70000
		done := 0
		var c Chain
		for done < total {
			batch := 1 + rng.IntN(4)
			heads := map[uint16]uint32{}
			for range batch {
				r := a.get(uint32(1 + rng.IntN(32)))
				w := a.get(uint32(1 + rng.IntN(32)))
				h, err := drv.Add([]Buffer{r}, []Buffer{w})
				if errors.Is(err, ErrQueueFull) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				heads[h] = w.Len
			}
			drv.Publish()
			var used []UsedElem
			for {
				ok, err := dev.PopInto(&c)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if heads[c.Head] != c.WritableLen {
					t.Fatalf("head %d writable %d", c.Head, c.WritableLen)
				}
				used = append(used, UsedElem{c.Head, c.WritableLen})
			}
			// Complete in reverse order: out-of-order completion is legal.
			for i, j := 0, len(used)-1; i < j; i, j = i+1, j-1 {
				used[i], used[j] = used[j], used[i]
			}
			dev.PushBatch(used)
			for range used {
				h, n, ok := drv.GetUsed()
				if !ok || heads[h] != n {
					t.Fatalf("GetUsed %d %d %v (%v)", h, n, ok, drv.Err())
				}
				delete(heads, h)
				done++
			}
			if len(heads) != 0 || drv.NumFree() != 4 {
				t.Fatalf("leftover %v free %d", heads, drv.NumFree())
			}
		}
		if dev.UsedIdx() != uint16(done) || dev.NextAvail() != uint16(done) {
			t.Fatalf("indices %d %d after %d", dev.UsedIdx(), dev.NextAvail(), done)
		}
	}
}

func TestQueueFull(t *testing.T) {
	e := newEnv(t, 4)
	drv, _ := e.pair(t, false)
	b := Buffer{r1Base, 8}
	if _, err := drv.Add([]Buffer{b, b, b}, []Buffer{b, b}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("5 descriptors in a 4-queue: %v", err)
	}
	for range 4 {
		if _, err := drv.AddIndirect(r2Base, []Buffer{b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := drv.Add([]Buffer{b}, nil); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("full: %v", err)
	}
	if _, err := drv.AddIndirect(r2Base, []Buffer{b}, nil); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("full indirect: %v", err)
	}
}

// TestReconnect drops the device queue with used entries in the ring and
// chains outstanding, and continues with a new one, as after a back-end
// restart (GET_VRING_BASE -> SET_VRING_BASE, used index read from memory).
func TestReconnect(t *testing.T) {
	e := newEnv(t, 8)
	drv, dev := e.pair(t, true)
	a := &alloc{}
	for i := range 5 {
		roundTrip(t, e, drv, dev, a, req{r: []uint32{8}, w: []uint32{8}}, byte(i))
	}
	// Two more popped but not completed by the old instance.
	h1, _ := drv.Add([]Buffer{a.get(8)}, nil)
	h2, _ := drv.Add([]Buffer{a.get(8)}, nil)
	drv.Publish()
	c1, _, _ := dev.Pop()
	dev.Push(c1.Head, 0) // completes h1
	_, _, _ = dev.Pop()  // h2 lost with the old instance
	base := dev.NextAvail()

	dev2, err := NewDeviceQueue(e.mem, 8, e.addrs, true)
	if err != nil {
		t.Fatal(err)
	}
	if dev2.UsedIdx() != 6 {
		t.Fatalf("new queue used idx %d, want 6", dev2.UsedIdx())
	}
	dev2.SetNextAvail(base)
	if _, ok, err := dev2.Pop(); ok || err != nil {
		t.Fatalf("nothing new expected: %v %v", ok, err)
	}
	// The driver gets h1 back, then carries on with the new instance.
	if h, _, ok := drv.GetUsed(); !ok || h != h1 {
		t.Fatalf("GetUsed %d %v", h, ok)
	}
	h3, _ := drv.Add([]Buffer{a.get(8)}, []Buffer{a.get(4)})
	drv.Publish()
	c, ok, err := dev2.Pop()
	if !ok || err != nil || c.Head != h3 {
		t.Fatalf("pop after reconnect: %v %v %d", ok, err, c.Head)
	}
	dev2.Push(h3, 4)
	if h, n, ok := drv.GetUsed(); !ok || h != h3 || n != 4 {
		t.Fatalf("GetUsed after reconnect %d %d %v", h, n, ok)
	}
	_ = h2
	// The new instance also accepts a memory table swap.
	if err := dev2.SetMemory(e.mem); err != nil {
		t.Fatal(err)
	}
}
