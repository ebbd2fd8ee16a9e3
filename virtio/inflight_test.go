package virtio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

// inflightRegion maps a fresh (zeroed) inflight buffer for one queue, as
// GET_INFLIGHT_FD would hand out.
func inflightRegion(t *testing.T, size uint16) guestmem.View {
	m, err := guestmem.MapAnonymous(InflightQueueSize(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	return m.View()
}

func TestInflightFreshRegion(t *testing.T) {
	e := newEnv(t, 16)
	_, dev := e.pair(t, false)
	v := inflightRegion(t, 16)
	if err := dev.SetInflight(v); err != nil {
		t.Fatal(err)
	}
	if v.Uint16(inflOffVersion) != 1 || v.Uint16(inflOffDescNum) != 16 {
		t.Fatalf("header not initialised: version %d desc_num %d", v.Uint16(inflOffVersion), v.Uint16(inflOffDescNum))
	}
	if p, err := dev.InflightPending(); err != nil || len(p) != 0 {
		t.Fatalf("pending %v %v", p, err)
	}
}

func TestInflightBadRegion(t *testing.T) {
	e := newEnv(t, 16)
	_, dev := e.pair(t, false)
	if _, err := dev.InflightPending(); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("no region: %v", err)
	}
	v := inflightRegion(t, 16)
	small, _ := v.Sub(0, 16+16*15)
	if err := dev.SetInflight(small); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("small region: %v", err)
	}
	odd, _ := v.Sub(8, 16+16*16)
	if err := dev.SetInflight(odd); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("short region at offset: %v", err)
	}
	v.PutUint16(inflOffDescNum, 32)
	if err := dev.SetInflight(v); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("desc_num mismatch: %v", err)
	}
	v.PutUint16(inflOffDescNum, 16)
	v.PutUint16(inflOffVersion, 7)
	if err := dev.SetInflight(v); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("version 7: %v", err)
	}
	v.PutUint16(inflOffVersion, 1)
	v.PutUint16(inflDescOff(3), 2) // inflight byte 2
	if err := dev.SetInflight(v); !errors.Is(err, ErrBadInflight) {
		t.Fatalf("inflight=2: %v", err)
	}
	if _, err := dev.InflightPending(); !errors.Is(err, ErrBadInflight) {
		t.Fatal("failed SetInflight must not attach the region")
	}
}

// TestInflightCrashRecovery pops several chains, completes some of them out
// of order (singly and in a batch), "crashes" (drops the DeviceQueue), and
// checks a new instance over the same guest memory and inflight region
// finds exactly the unfinished heads, in pop order, and can resubmit them.
func TestInflightCrashRecovery(t *testing.T) {
	for _, tornBatch := range []bool{false, true} {
		name := "clean"
		if tornBatch {
			name = "crash between used->idx and clearing the batch"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 16)
			drv, dev := e.pair(t, true)
			iv := inflightRegion(t, 16)
			if err := dev.SetInflight(iv); err != nil {
				t.Fatal(err)
			}
			a := &alloc{}
			// Warm up so indices are not zero.
			for i := range 3 {
				roundTrip(t, e, drv, dev, a, req{r: []uint32{8}}, byte(i))
			}
			var popped []uint16
			for range 7 {
				if _, err := drv.Add([]Buffer{a.get(8)}, []Buffer{a.get(8)}); err != nil {
					t.Fatal(err)
				}
			}
			drv.Publish()
			for range 6 { // the 7th stays in the avail ring, never popped
				c, ok, err := dev.Pop()
				if !ok || err != nil {
					t.Fatal(ok, err)
				}
				popped = append(popped, c.Head)
			}
			// Complete popped[1] alone, then popped[4], popped[2] as a batch.
			dev.Push(popped[1], 8)
			dev.PushBatch([]UsedElem{{popped[4], 8}, {popped[2], 8}})
			want := []uint16{popped[0], popped[3], popped[5]}
			if tornBatch {
				// Simulate a crash after used->idx moved but before the
				// batch was cleared: restore the pre-clear state.
				for _, h := range []uint16{popped[4], popped[2]} {
					iv.PutUint16(inflDescOff(h), 1)
				}
				iv.PutUint16(inflOffUsedIdx, dev.UsedIdx()-2)
			}
			usedBefore := dev.UsedIdx()

			// Crash: forget dev. The VMM replays SET_VRING_BASE with the
			// used index (GET_VRING_BASE failed), then the kick.
			dev2, err := NewDeviceQueue(e.mem, 16, e.addrs, true)
			if err != nil {
				t.Fatal(err)
			}
			dev2.SetNextAvail(dev2.UsedIdx())
			if err := dev2.SetInflight(iv); err != nil {
				t.Fatal(err)
			}
			got, err := dev2.InflightPending()
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("pending %v (%v), want %v", got, err, want)
			}
			if dev2.NextAvail() != usedBefore+3 {
				t.Fatalf("next avail %d, want %d", dev2.NextAvail(), usedBefore+3)
			}
			if iv.Uint16(inflOffUsedIdx) != usedBefore {
				t.Fatal("region used_idx not brought up to date")
			}
			if _, err := dev2.PopInflight(popped[1]); !errors.Is(err, ErrNotInflight) {
				t.Fatalf("completed head re-popped: %v", err)
			}
			// Resubmit in order (the first by picking it with PopInflight,
			// the rest through Pop, which returns pending heads first);
			// complete them; then the 7th chain.
			for i, h := range got {
				var c Chain
				var err error
				if i == 0 {
					c, err = dev2.PopInflight(h)
				} else {
					var ok bool
					c, ok, err = dev2.Pop()
					if !ok {
						err = errors.New("Pop returned nothing")
					}
				}
				if err != nil || c.Head != h || c.WritableLen != 8 {
					t.Fatalf("resubmitting %d: %v %+v", h, err, c)
				}
				c.WriteAll([]byte("resubmit"))
				dev2.Push(h, 8)
			}
			if p, _ := dev2.InflightPending(); len(p) != 0 {
				t.Fatalf("still pending %v", p)
			}
			c, ok, err := dev2.Pop()
			if !ok || err != nil {
				t.Fatalf("7th chain: %v %v", ok, err)
			}
			// The new pop's counter continues after the old ones.
			if cnt := binary.LittleEndian.Uint64(iv.Bytes()[inflDescOff(c.Head)+8:]); cnt <= iv.Uint64(inflDescOff(popped[5])+8) {
				t.Fatalf("counter %d did not continue", cnt)
			}
			dev2.Push(c.Head, 0)
			// 3 from the old instance, 3 resubmitted, the 7th.
			for i := range 7 {
				if _, _, ok := drv.GetUsed(); !ok {
					t.Fatalf("driver got %d of 7 completions (%v)", i, drv.Err())
				}
			}
			if _, _, ok := drv.GetUsed(); ok || drv.NumFree() != 16 {
				t.Fatalf("extra completion or leaked descriptors (%d free)", drv.NumFree())
			}
			for h := range uint16(16) {
				if iv.Uint16(inflDescOff(h))&0xff != 0 {
					t.Fatalf("head %d still marked in flight", h)
				}
			}
		})
	}
}

// inflSeed builds one queue's inflight region: its header, and the heads
// in flight with their pop counters.
func inflSeed(version, descNum, lastBatchHead, usedIdx uint16, inflight map[uint16]uint64) []byte {
	b := make([]byte, InflightQueueSize(fzSize))
	binary.LittleEndian.PutUint16(b[inflOffVersion:], version)
	binary.LittleEndian.PutUint16(b[inflOffDescNum:], descNum)
	binary.LittleEndian.PutUint16(b[inflOffLastBatchHead:], lastBatchHead)
	binary.LittleEndian.PutUint16(b[inflOffUsedIdx:], usedIdx)
	for h, counter := range inflight {
		b[inflDescOff(h)+inflDescOffInflight] = 1
		binary.LittleEndian.PutUint64(b[inflDescOff(h)+inflDescOffCounter:], counter)
	}
	return b
}

// FuzzInflightRecovery hands SetInflight a region as a reconnecting
// back-end finds it: the front-end keeps the buffer across back-end
// restarts and may have forged it, and the used ring may hold any index.
// SetInflight either refuses it (ErrBadInflight), leaving the region and
// the queue as they were, or adopts it: every pending head a real one,
// listed once, and NextAvail past them. The pops that follow hand out the
// pending heads first, in their order, and never a view outside guest
// memory (fzEnv's checks).
func FuzzInflightRecovery(f *testing.F) {
	fe := newFzEnv(f)
	m, err := guestmem.MapAnonymous(InflightQueueSize(fzSize))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Unmap() })
	var all []byte // every head a valid one-buffer chain
	for range fzSize {
		all = append(all, desc16(fzData, 8, fW, 0)...)
	}
	f.Add(inflSeed(0, 0, 0, 0, nil), uint16(0), all, ring(0), uint16(1))
	f.Add(inflSeed(1, fzSize, 0, 5, map[uint16]uint64{2: 7, 5: 3}), uint16(5), all, ring(0, 0, 0, 0, 0, 5, 2, 1), uint16(8))
	// A batch of two (heads 2 then 6) reached the driver before the crash.
	torn := inflSeed(1, fzSize, 2, 3, map[uint16]uint64{2: 7, 6: 8, 4: 1})
	binary.LittleEndian.PutUint16(torn[inflDescOff(2)+inflDescOffNext:], 6)
	f.Add(torn, uint16(5), all, ring(0, 0, 0, 0, 0, 4, 0, 0), uint16(6))
	f.Add(inflSeed(7, fzSize, 0, 0, nil), uint16(0), all, ring(0), uint16(1))
	f.Add(inflSeed(1, 0, 0, 0, map[uint16]uint64{9: 1}), uint16(40), all, ring(0), uint16(41))
	f.Add(inflSeed(1, fzSize, 0, 0, map[uint16]uint64{1: ^uint64(0)}), uint16(0), all, ring(1), uint16(1))
	f.Add(inflSeed(1, fzSize, 0, 0, map[uint16]uint64{3: 1}), uint16(0), descs(desc16(fzData, 8, fN, 3)), ring(3), uint16(1))

	region := m.View()
	f.Fuzz(func(t *testing.T, reg []byte, usedIdx uint16, desc, avail []byte, availIdx uint16) {
		check := fe.lay(t, fzInput{desc: desc, ring: avail, availIdx: availIdx})
		binary.LittleEndian.PutUint16(fe.bytes(t, fe.addrs.Used+2, 2), usedIdx)
		b := region.Bytes()
		clear(b)
		copy(b, reg)
		before := bytes.Clone(b)
		q, err := NewDeviceQueue(fe.mem, fzSize, fe.addrs, false)
		if err != nil {
			t.Fatal(err)
		}
		q.SetNextAvail(usedIdx) // as a front-end replays it after a crash
		if err := q.SetInflight(region); err != nil {
			if !errors.Is(err, ErrBadInflight) {
				t.Fatalf("error of unknown class: %v", err)
			}
			if !bytes.Equal(b, before) {
				t.Fatal("a refused region was changed")
			}
			if _, err := q.InflightPending(); err == nil || q.NextAvail() != usedIdx {
				t.Fatal("a refused region was adopted")
			}
			return
		}
		pending, err := q.InflightPending()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint16]bool{}
		for _, h := range pending {
			if h >= fzSize || seen[h] {
				t.Fatalf("pending heads %v", pending)
			}
			seen[h] = true
		}
		if want := usedIdx + uint16(len(pending)); q.NextAvail() != want {
			t.Fatalf("next avail %d, want %d", q.NextAvail(), want)
		}
		if region.Uint16(inflOffVersion) != inflightVersion || region.Uint16(inflOffDescNum) != fzSize || region.Uint16(inflOffUsedIdx) != usedIdx {
			t.Fatalf("region header not brought up to date: % x", b[:inflHeaderSize])
		}
		res := fe.popAll(t, q)
		for i, h := range res.heads[:min(len(res.heads), len(pending))] {
			if h != pending[i] {
				t.Fatalf("popped %v, pending first were %v", res.heads, pending)
			}
		}
		check()
	})
}
