package guestmem

import (
	"bytes"
	"testing"
)

// splitViews cuts buf into views of the given lengths (taken mod 9, so
// zero-length pieces occur) until buf runs out; the rest is one last view.
func splitViews(buf []byte, lens []byte) []View {
	var vs []View
	for _, l := range lens {
		n := min(int(l%9), len(buf))
		vs = append(vs, View{b: buf[:n:n]})
		buf = buf[n:]
	}
	return append(vs, View{b: buf})
}

// checkViewsModel checks CopyInViews, CopyOutViews, a Cursor used for a
// run of copies, and CopyViews against plain byte-slice copies.
func checkViewsModel(t *testing.T, size int, lens, lens2 []byte, off, n uint16) {
	model := make([]byte, size)
	for i := range model {
		model[i] = byte(i * 7)
	}
	buf := bytes.Clone(model)
	vs := splitViews(buf, lens)
	o := int(off) % (size + 1)
	p := make([]byte, int(n)%64)
	for i := range p {
		p[i] = byte(0x80 + i)
	}
	want := copy(model[o:], p)
	if got := CopyInViews(vs, uint64(o), p); got != want || !bytes.Equal(buf, model) {
		t.Fatalf("CopyInViews(off %d, %d bytes) = %d, want %d; bytes %x, want %x", o, len(p), got, want, buf, model)
	}
	out := make([]byte, len(p))
	want = copy(out, model[o:])
	got := make([]byte, len(p))
	if n := CopyOutViews(got, vs, uint64(o)); n != want || !bytes.Equal(got[:n], out[:want]) {
		t.Fatalf("CopyOutViews(off %d) = %d %x, want %d %x", o, n, got[:n], want, out[:want])
	}
	// A cursor over a run of pieces, forwards then back to the start.
	var c Cursor
	whole := make([]byte, size)
	for at := 0; at < size; at += 5 {
		c.CopyOut(whole[at:min(at+5, size)], vs, uint64(at))
	}
	if !bytes.Equal(whole, model) {
		t.Fatalf("cursor copies: %x, want %x", whole, model)
	}
	if size > 0 {
		whole[0] = ^model[0]
		if k := c.CopyOut(whole[:1], vs, 0); k != 1 || whole[0] != model[0] {
			t.Fatalf("cursor rewind copied %d", k)
		}
	}
	// Views to views, with a different split on each side.
	dbuf := make([]byte, size/2+1)
	dvs := splitViews(dbuf, lens2)
	if k := CopyViews(dvs, vs); k != uint64(min(len(dbuf), size)) || !bytes.Equal(dbuf[:k], model[:k]) {
		t.Fatalf("CopyViews = %d, %x", k, dbuf)
	}
}

func TestViewsCopies(t *testing.T) {
	for _, tc := range []struct {
		size        int
		lens, lens2 []byte
		off, n      uint16
	}{
		{0, nil, nil, 0, 0},
		{0, []byte{0, 0}, nil, 0, 5},
		{30, []byte{3, 0, 7}, []byte{1, 1, 0, 8}, 0, 30},
		{30, []byte{3, 0, 7}, []byte{2}, 2, 5},
		{30, []byte{3, 0, 7}, []byte{2}, 3, 9},
		{30, []byte{8, 8, 8}, nil, 29, 10},
		{30, []byte{8, 8, 8}, nil, 30, 10},
		{100, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0}, []byte{4, 4}, 17, 63},
	} {
		checkViewsModel(t, tc.size, tc.lens, tc.lens2, tc.off, tc.n)
	}
}

func TestCopyViews(t *testing.T) {
	m, err := MapAnonymous(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	v := m.View()
	for i := range 100 {
		v.Bytes()[i] = byte(i)
	}
	sub := func(off, n uint64) View { s, _ := v.Sub(off, n); return s }
	src := []View{sub(0, 3), {}, sub(3, 7), sub(10, 20)}
	dst := []View{sub(1000, 10), sub(2000, 5), sub(3000, 100)}
	if n := CopyViews(dst, src); n != 30 {
		t.Fatalf("copied %d", n)
	}
	for i := range 30 {
		var got byte
		switch {
		case i < 10:
			got = v.Bytes()[1000+i]
		case i < 15:
			got = v.Bytes()[2000+i-10]
		default:
			got = v.Bytes()[3000+i-15]
		}
		if got != byte(i) {
			t.Fatalf("byte %d = %d", i, got)
		}
	}
}

func TestViewsCopiesDoNotAllocate(t *testing.T) {
	buf := make([]byte, 64)
	vs := splitViews(buf, []byte{3, 0, 7, 8})
	dvs := splitViews(make([]byte, 64), []byte{5, 5})
	p := make([]byte, 20)
	if a := testing.AllocsPerRun(100, func() {
		CopyInViews(vs, 5, p)
		CopyOutViews(p, vs, 9)
		CopyViews(dvs, vs)
		var c Cursor
		c.CopyIn(vs, 1, p)
	}); a != 0 {
		t.Fatalf("%v allocations per run", a)
	}
}

func FuzzViewsCopies(f *testing.F) {
	f.Add(30, []byte{3, 0, 7}, []byte{1, 1}, uint16(2), uint16(9))
	f.Fuzz(func(t *testing.T, size int, lens, lens2 []byte, off, n uint16) {
		size = int(uint(size) % 200)
		checkViewsModel(t, size, lens, lens2, off, n)
	})
}
