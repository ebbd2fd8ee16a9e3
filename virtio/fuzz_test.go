package virtio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

// The fuzz harness: a queue of fzSize entries in the test env. The fuzzer
// controls the descriptor table, the avail ring entries, avail->idx, the
// device's next-avail index and an indirect-table area at fzInd. Data
// memory (everything outside the rings) is filled with a known pattern
// before Pop and checked afterwards: Pop must never write to it.
const (
	fzSize    = 8
	fzInd     = r1Base + r1Size - 0x1000 // indirect tables (in r1)
	fzIndMax  = 0x1000
	fzData    = r1Base // buffers
	fzMaxPops = fzSize + 2
)

type fzInput struct {
	desc      []byte // up to 16*fzSize bytes of descriptor table
	ring      []byte // up to 2*fzSize bytes of avail ring entries
	availIdx  uint16 // avail->idx; its top bit also selects EVENT_IDX mode
	nextAvail uint16 // the device's next-avail (SET_VRING_BASE)
	ind       []byte // up to fzIndMax bytes at fzInd
}

// desc16 encodes one descriptor.
func desc16(addr uint64, length uint32, flags, next uint16) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, addr)
	binary.LittleEndian.PutUint32(b[8:], length)
	binary.LittleEndian.PutUint16(b[12:], flags)
	binary.LittleEndian.PutUint16(b[14:], next)
	return b
}

func descs(ds ...[]byte) []byte { return bytes.Join(ds, nil) }

func ring(heads ...uint16) []byte {
	b := make([]byte, 2*len(heads))
	for i, h := range heads {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}

const (
	fN = DescFNext
	fW = DescFWrite
	fI = DescFIndirect
)

type fzCase struct {
	name  string
	in    fzInput
	pops  int  // successful pops expected before the error
	bad   bool // expect ErrBadChain after pops
	oor   bool // expect guestmem.ErrOutOfRange as well
	views int  // for good cases: total views expected over all pops (-1: don't check)
}

// fzCases are the seed corpus: valid chains and one of each hostile kind.
var fzCases = []fzCase{
	// Valid.
	{name: "valid_readable", in: fzInput{desc: descs(desc16(fzData, 64, 0, 0)), ring: ring(0), availIdx: 1}, pops: 1, views: 1},
	{name: "valid_mixed", in: fzInput{desc: descs(desc16(fzData, 16, fN, 1), desc16(fzData+16, 16, fN|fW, 2), desc16(fzData+32, 16, fW, 0)), ring: ring(0), availIdx: 1}, pops: 1, views: 3},
	{name: "valid_indirect", in: fzInput{desc: descs(desc16(fzInd, 32, fI|fW, 0)), ring: ring(0), availIdx: 1,
		ind: descs(desc16(fzData, 8, fN, 1), desc16(fzData+8, 8, fW, 0))}, pops: 1, views: 2},
	{name: "valid_direct_then_indirect", in: fzInput{desc: descs(desc16(fzData, 8, fN, 1), desc16(fzInd, 16, fI, 0)), ring: ring(0), availIdx: 1,
		ind: desc16(fzData+8, 8, fW, 0)}, pops: 1, views: 2},
	{name: "valid_zero_length", in: fzInput{desc: descs(desc16(0, 0, fN, 1), desc16(hole, 0, fW, 0)), ring: ring(0), availIdx: 1}, pops: 1, views: 0},
	{name: "valid_wrapping_indices", in: fzInput{desc: descs(desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0)),
		ring: ring(0, 0, 0, 0, 0, 0, 1, 2), availIdx: 0x0001, nextAvail: 0xfffe}, pops: 3, views: 3},
	{name: "valid_full_ring", in: fzInput{desc: descs(desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0),
		desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0), desc16(fzData, 1, 0, 0)),
		ring: ring(0, 1, 2, 3, 4, 5, 6, 7), availIdx: 8}, pops: 8, views: 8},
	{name: "valid_empty", in: fzInput{availIdx: 5, nextAvail: 5}, pops: 0, views: 0},

	// Hostile: links and loops.
	{name: "self_loop", in: fzInput{desc: descs(desc16(fzData, 16, fN, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "loop_a_b_a", in: fzInput{desc: descs(desc16(fzData, 16, fN, 1), desc16(fzData, 16, fN, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "loop_longer_than_size", in: fzInput{desc: descs(desc16(fzData, 1, fN, 1), desc16(fzData, 1, fN, 2), desc16(fzData, 1, fN, 3),
		desc16(fzData, 1, fN, 4), desc16(fzData, 1, fN, 5), desc16(fzData, 1, fN, 6), desc16(fzData, 1, fN, 7), desc16(fzData, 1, fN, 3)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "next_eq_size", in: fzInput{desc: descs(desc16(fzData, 16, fN, fzSize)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "next_ffff", in: fzInput{desc: descs(desc16(fzData, 16, fN, 0xffff)), ring: ring(0), availIdx: 1}, bad: true},
	// Indirect.
	{name: "indirect_and_next", in: fzInput{desc: descs(desc16(fzInd, 16, fI|fN, 1), desc16(fzData, 8, 0, 0)), ring: ring(0), availIdx: 1, ind: desc16(fzData, 8, 0, 0)}, bad: true},
	{name: "nested_indirect", in: fzInput{desc: descs(desc16(fzInd, 32, fI, 0)), ring: ring(0), availIdx: 1,
		ind: descs(desc16(fzData, 8, fN, 1), desc16(fzInd, 16, fI, 0))}, bad: true},
	{name: "indirect_len_0", in: fzInput{desc: descs(desc16(fzInd, 0, fI, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "indirect_len_24", in: fzInput{desc: descs(desc16(fzInd, 24, fI, 0)), ring: ring(0), availIdx: 1, ind: desc16(fzData, 8, 0, 0)}, bad: true},
	{name: "indirect_len_huge", in: fzInput{desc: descs(desc16(fzInd, (MaxQueueSize+1)*16, fI, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "indirect_len_max_u32", in: fzInput{desc: descs(desc16(fzInd, 0xfffffff0, fI, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "indirect_outside_memory", in: fzInput{desc: descs(desc16(hole, 16, fI, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "indirect_crosses_region_end", in: fzInput{desc: descs(desc16(r1Base+r1Size-16, 32, fI, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "indirect_loop", in: fzInput{desc: descs(desc16(fzInd, 32, fI, 0)), ring: ring(0), availIdx: 1,
		ind: descs(desc16(fzData, 8, fN, 1), desc16(fzData, 8, fN, 0))}, bad: true},
	{name: "indirect_next_out_of_table", in: fzInput{desc: descs(desc16(fzInd, 32, fI, 0)), ring: ring(0), availIdx: 1,
		ind: descs(desc16(fzData, 8, fN, 2), desc16(fzData, 8, 0, 0), desc16(fzData, 8, 0, 0))}, bad: true},
	// Buffers.
	{name: "buffer_outside_memory", in: fzInput{desc: descs(desc16(hole, 16, 0, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "buffer_address_wraps", in: fzInput{desc: descs(desc16(^uint64(0)-7, 32, fW, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "buffer_crosses_region_end", in: fzInput{desc: descs(desc16(r2Base+r2Size-8, 16, fW, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "buffer_crosses_adjacent_regions", in: fzInput{desc: descs(desc16(r1Base-8, 16, 0, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "bad_buffer_after_good", in: fzInput{desc: descs(desc16(fzData, 16, fN|fW, 1), desc16(hole, 16, fW, 0)), ring: ring(0), availIdx: 1}, bad: true, oor: true},
	{name: "readable_after_writable", in: fzInput{desc: descs(desc16(fzData, 16, fN|fW, 1), desc16(fzData+16, 16, 0, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "readable_after_writable_indirect", in: fzInput{desc: descs(desc16(fzData, 16, fN|fW, 1), desc16(fzInd, 16, fI, 0)), ring: ring(0), availIdx: 1,
		ind: desc16(fzData+16, 16, 0, 0)}, bad: true},
	{name: "readable_len_overflow", in: fzInput{desc: descs(desc16(fzData, 0x80000000, fN, 1), desc16(fzData, 0x80000000, 0, 0)), ring: ring(0), availIdx: 1}, bad: true},
	{name: "writable_len_overflow", in: fzInput{desc: descs(desc16(fzData, 0xffffffff, fN|fW, 1), desc16(fzData, 1, fW, 0)), ring: ring(0), availIdx: 1}, bad: true},
	// Ring indices.
	{name: "avail_idx_too_far_ahead", in: fzInput{desc: descs(desc16(fzData, 1, 0, 0)), ring: ring(0), availIdx: 100 + fzSize + 1, nextAvail: 100}, bad: true},
	{name: "avail_idx_moved_back", in: fzInput{desc: descs(desc16(fzData, 1, 0, 0)), ring: ring(0), availIdx: 99, nextAvail: 100}, bad: true},
	{name: "head_eq_size", in: fzInput{ring: ring(fzSize), availIdx: 1}, bad: true},
	{name: "head_ffff", in: fzInput{ring: ring(0xffff), availIdx: 1}, bad: true},
	{name: "head_offered_twice", in: fzInput{desc: descs(desc16(fzData, 1, 0, 0)), ring: ring(0, 0), availIdx: 2}, pops: 1, bad: true},
}

// fzEnv is reused across fuzz executions (mmaps are slow to create).
type fzEnv struct {
	*env
	rings, r1, r2 []byte
	r1Pat, r2Pat  []byte // the canary patterns
	r1Want        []byte // r1 as laid out for the current input
}

func newFzEnv(tb testing.TB) *fzEnv {
	e := newEnv(tb, fzSize)
	f := &fzEnv{env: e, r1: e.maps[1].View().Bytes(), r2: e.maps[2].View().Bytes()}
	_, _, used := RingSizes(fzSize)
	f.rings = e.bytes(tb, e.addrs.Desc, e.addrs.Used+used-e.addrs.Desc)
	f.r1Pat = make([]byte, len(f.r1))
	pattern(f.r1Pat, 11)
	f.r2Pat = make([]byte, len(f.r2))
	pattern(f.r2Pat, 29)
	f.r1Want = make([]byte, len(f.r1))
	return f
}

// result of one harness run.
type fzResult struct {
	pops, views int
	heads       []uint16 // of the chains popped, in order
	err         error
}

// run lays the input out in guest memory, pops until empty, error or
// fzMaxPops, and checks the invariants that hold for any input.
func (f *fzEnv) run(t testing.TB, in fzInput) fzResult {
	t.Helper()
	check := f.lay(t, in)
	eventIdx := in.availIdx&0x8000 != 0 // cover both modes
	q, err := NewDeviceQueue(f.mem, fzSize, f.addrs, eventIdx)
	if err != nil {
		t.Fatal(err)
	}
	q.SetNextAvail(in.nextAvail)
	res := f.popAll(t, q)
	check()
	return res
}

// lay resets guest memory (zero rings, canary patterns in the data
// regions) and writes the input into it. The returned check fails t if
// anything but the used ring changed since.
func (f *fzEnv) lay(t testing.TB, in fzInput) (check func()) {
	t.Helper()
	clear(f.rings)
	copy(f.r1, f.r1Pat)
	copy(f.r2, f.r2Pat)
	desc := f.bytes(t, f.addrs.Desc, 16*fzSize)
	copy(desc, in.desc)
	avail := f.bytes(t, f.addrs.Avail, 6+2*fzSize)
	copy(avail[4:4+2*fzSize], in.ring)
	binary.LittleEndian.PutUint16(avail[2:], in.availIdx)
	indOff := fzInd - r1Base
	copy(f.r1[indOff:indOff+fzIndMax], in.ind)
	copy(f.r1Want, f.r1)
	descWant := bytes.Clone(desc)
	availWant := bytes.Clone(avail)
	return func() {
		t.Helper()
		// Pop wrote nothing but (with EVENT_IDX) avail_event in the used
		// ring.
		if !bytes.Equal(f.r1, f.r1Want) {
			t.Fatal("Pop wrote into data region r1")
		}
		if !bytes.Equal(f.r2, f.r2Pat) {
			t.Fatal("Pop wrote into region r2")
		}
		if !bytes.Equal(desc, descWant) || !bytes.Equal(avail, availWant) {
			t.Fatal("Pop wrote into the descriptor table or avail ring")
		}
	}
}

// popAll pops from q until empty, error or fzMaxPops, checking each chain
// and each failure.
func (f *fzEnv) popAll(t testing.TB, q *DeviceQueue) fzResult {
	t.Helper()
	var res fzResult
	var c Chain
	for range fzMaxPops {
		before := q.NextAvail()
		ok, err := q.PopInto(&c)
		if err != nil {
			if !errors.Is(err, ErrBadChain) && !errors.Is(err, guestmem.ErrOutOfRange) {
				t.Fatalf("error of unknown class: %v", err)
			}
			if q.NextAvail() != before {
				t.Fatalf("failed Pop moved NextAvail %d -> %d", before, q.NextAvail())
			}
			if len(c.Readable)+len(c.Writable) != 0 {
				t.Fatal("failed Pop left views in the chain")
			}
			res.err = err
			break
		}
		if !ok {
			break
		}
		res.pops++
		res.heads = append(res.heads, c.Head)
		if c.Head >= fzSize {
			t.Fatalf("head %d", c.Head)
		}
		var r, w uint64
		for _, v := range c.Readable {
			if !f.inMemory(v) {
				t.Fatalf("readable view of %d bytes outside guest memory", v.Len())
			}
			r += v.Len()
		}
		for _, v := range c.Writable {
			if !f.inMemory(v) {
				t.Fatalf("writable view of %d bytes outside guest memory", v.Len())
			}
			w += v.Len()
		}
		if r != uint64(c.ReadableLen) || w != uint64(c.WritableLen) {
			t.Fatalf("lengths %d/%d, views sum to %d/%d", c.ReadableLen, c.WritableLen, r, w)
		}
		res.views += len(c.Readable) + len(c.Writable)
	}
	return res
}

func (in fzInput) corpus() string {
	return fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n[]byte(%s)\nuint16(%d)\nuint16(%d)\n[]byte(%s)\n",
		strconv.Quote(string(in.desc)), strconv.Quote(string(in.ring)), in.availIdx, in.nextAvail, strconv.Quote(string(in.ind)))
}

// TestHostileChains runs every seed case and checks its exact outcome:
// hostile chains are rejected with ErrBadChain (and ErrOutOfRange for
// addresses), after the expected number of good pops, with no byte of
// data memory written (the harness checks the canary).
func TestHostileChains(t *testing.T) {
	f := newFzEnv(t)
	for _, c := range fzCases {
		t.Run(c.name, func(t *testing.T) {
			for _, ev := range []uint16{0, 0x8000} {
				in := c.in
				in.availIdx ^= ev
				in.nextAvail ^= ev
				res := f.run(t, in)
				if res.pops != c.pops {
					t.Fatalf("%d good pops, want %d (err %v)", res.pops, c.pops, res.err)
				}
				if c.bad != errors.Is(res.err, ErrBadChain) || (!c.bad && res.err != nil) {
					t.Fatalf("err %v, want bad=%v", res.err, c.bad)
				}
				if c.oor != errors.Is(res.err, guestmem.ErrOutOfRange) {
					t.Fatalf("err %v, want out-of-range=%v", res.err, c.oor)
				}
				if !c.bad && c.views >= 0 && res.views != c.views {
					t.Fatalf("%d views, want %d", res.views, c.views)
				}
			}
		})
	}
}

// TestFuzzCorpusCurrent checks that testdata holds every seed case, so the
// hostile cases run as fuzz seeds in every `go test`. Regenerate with
// VIRTIO_WRITE_CORPUS=1 go test -run TestFuzzCorpusCurrent ./virtio/
func TestFuzzCorpusCurrent(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDescriptorChain")
	write := os.Getenv("VIRTIO_WRITE_CORPUS") == "1"
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range fzCases {
		p := filepath.Join(dir, "seed_"+c.name)
		if write {
			if err := os.WriteFile(p, []byte(c.in.corpus()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != c.in.corpus() {
			t.Errorf("corpus file %s missing or stale (%v); regenerate with VIRTIO_WRITE_CORPUS=1", p, err)
		}
	}
}

// FuzzDescriptorChain feeds arbitrary descriptor tables, avail rings and
// indices to Pop. Pop must never panic, never return a view outside guest
// memory, never write data memory, and fail only with ErrBadChain or
// guestmem.ErrOutOfRange.
func FuzzDescriptorChain(f *testing.F) {
	fe := newFzEnv(f)
	f.Fuzz(func(t *testing.T, desc, ring []byte, availIdx, nextAvail uint16, ind []byte) {
		fe.run(t, fzInput{desc: desc, ring: ring, availIdx: availIdx, nextAvail: nextAvail, ind: ind})
	})
}
