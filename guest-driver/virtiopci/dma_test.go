//go:build linux

package virtiopci

import (
	"errors"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

// fakeBacking hands out anonymous memory with made-up physical
// addresses: pas(chunk, pages) says where each page of a chunk is.
type fakeBacking struct {
	t      *testing.T
	pas    func(chunk, pages int) []uint64
	chunks int
	maps   []*guestmem.Mapping
}

func (f *fakeBacking) chunk(pages int) (*guestmem.Mapping, []uint64, error) {
	m, err := guestmem.MapAnonymous(uint64(pages) * hugePageSize)
	if err != nil {
		return nil, nil, err
	}
	f.maps = append(f.maps, m)
	f.chunks++
	return m, f.pas(f.chunks-1, pages), nil
}

// linear places chunk c's pages physically consecutive at 4 GiB + c GiB.
func linear(c, pages int) []uint64 {
	pas := make([]uint64, pages)
	for i := range pas {
		pas[i] = 4<<30 + uint64(c)<<30 + uint64(i)*hugePageSize
	}
	return pas
}

func TestContiguous(t *testing.T) {
	const p = hugePageSize
	got := contiguous([]uint64{10 * p, 11 * p, 13 * p, 12 * p, 13 * p, 2 * p}, p)
	want := [][2]int{{0, 2}, {2, 3}, {3, 5}, {5, 6}}
	if len(got) != len(want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("runs %v, want %v", got, want)
		}
	}
	if len(contiguous(nil, p)) != 0 {
		t.Fatal("runs of nothing")
	}
}

// TestDMAAllocation: buffers are aligned in guest-physical space, zero,
// disjoint, translate through the pool's table to the same bytes, and
// the pool grows by whole chunks.
func TestDMAAllocation(t *testing.T) {
	fb := &fakeBacking{t: t, pas: linear}
	p := newDMAPool(fb, 2)
	defer p.close()
	type span struct{ lo, hi uint64 }
	var spans []span
	for i, c := range []struct{ size, align uint64 }{
		{100, 1}, {4096, 4096}, {24, 64}, {5000, 16}, {1 << 20, 1 << 20}, {3 << 20, 4096}, {64, 0},
	} {
		b, err := p.alloc(c.size, c.align)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		if b.Len() != c.size || c.align > 0 && b.GPA%c.align != 0 {
			t.Fatalf("alloc %d (%d aligned %d): %d bytes at %#x", i, c.size, c.align, b.Len(), b.GPA)
		}
		for _, x := range b.Bytes() {
			if x != 0 {
				t.Fatalf("alloc %d not zero", i)
			}
		}
		for _, s := range spans {
			if b.GPA < s.hi && s.lo < b.GPA+b.Len() {
				t.Fatalf("alloc %d [%#x, +%#x) overlaps [%#x, %#x)", i, b.GPA, b.Len(), s.lo, s.hi)
			}
		}
		spans = append(spans, span{b.GPA, b.GPA + b.Len()})
		b.Bytes()[0], b.Bytes()[b.Len()-1] = byte(i+1), byte(i+1)
		tb, err := p.table()
		if err != nil {
			t.Fatal(err)
		}
		v, err := tb.Translate(b.GPA, b.Len())
		if err != nil || v.Bytes()[0] != byte(i+1) || v.Bytes()[b.Len()-1] != byte(i+1) {
			t.Fatalf("alloc %d does not translate to its bytes: %v", i, err)
		}
	}
	// 4 MiB of 2-page chunks held the small ones and the 1 MiB one; the
	// 3 MiB one needed a chunk of its own.
	if fb.chunks != 2 {
		t.Errorf("%d chunks", fb.chunks)
	}
	if _, err := p.alloc(0, 1); err == nil {
		t.Error("zero-byte allocation")
	}
	if _, err := p.alloc(64, 3); err == nil {
		t.Error("alignment 3")
	}
}

// TestDMAScatteredPages: a request larger than a huge page needs
// physically consecutive pages; when a fresh chunk has none the pool
// says so, and smaller requests still fit in its pieces.
func TestDMAScatteredPages(t *testing.T) {
	fb := &fakeBacking{t: t, pas: func(c, pages int) []uint64 {
		pas := linear(c, pages)
		for i := range pas {
			pas[i] += uint64(i) * hugePageSize // a gap after every page
		}
		return pas
	}}
	p := newDMAPool(fb, 4)
	defer p.close()
	if _, err := p.alloc(3<<20, 4096); !errors.Is(err, errNoContiguous) {
		t.Fatalf("3 MiB over scattered pages: %v", err)
	}
	// The chunk the failed request brought stays: 8 x 1 MiB fill its 4
	// pages, the 9th needs a new chunk.
	var last uint64
	for i := range 9 {
		b, err := p.alloc(1<<20, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && b.GPA <= last {
			t.Fatalf("allocation %d at %#x after %#x", i, b.GPA, last)
		}
		last = b.GPA
	}
	if fb.chunks != 2 {
		t.Errorf("%d chunks", fb.chunks)
	}
}

func TestRunFit(t *testing.T) {
	m, err := guestmem.MapAnonymous(hugePageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	r := &run{gpa: 0x1000_0000 + 0x40, view: m.View(), used: 0}
	if off, ok := r.fit(64, 4096); !ok || off != 4096-0x40 {
		t.Errorf("fit aligned to 4096 at %#x: %#x %v", r.gpa, off, ok)
	}
	if _, ok := r.fit(hugePageSize, 1); !ok {
		t.Error("the whole run does not fit")
	}
	if _, ok := r.fit(hugePageSize+1, 1); ok {
		t.Error("one byte more fits")
	}
	if _, ok := r.fit(^uint64(0)-10, 1); ok {
		t.Error("a wrapping size fits")
	}
	r.used = hugePageSize
	if _, ok := r.fit(1, 1); ok {
		t.Error("a full run fits")
	}
}
