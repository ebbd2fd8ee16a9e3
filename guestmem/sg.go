package guestmem

// Scatter/gather over lists of views: a list of views is one buffer in
// pieces (an SGE list, a descriptor chain). These are the only routines
// that walk such a list to copy bytes; callers that can fault (guest
// memory backed by a file) run them under Guard.

// CopyViews copies from the src views into the dst views, in order, until
// either list ends, and returns the bytes copied: one copy, straight from
// one buffer into the other.
func CopyViews(dst, src []View) uint64 {
	var total uint64
	di, si := 0, 0
	var doff, soff uint64
	for di < len(dst) && si < len(src) {
		n := uint64(copy(dst[di].Bytes()[doff:], src[si].Bytes()[soff:]))
		total += n
		doff += n
		soff += n
		if doff == dst[di].Len() {
			di, doff = di+1, 0
		}
		if soff == src[si].Len() {
			si, soff = si+1, 0
		}
	}
	return total
}

// CopyInViews copies p into the bytes of vs starting off bytes in and
// returns the bytes copied: fewer than len(p) only if vs ends first.
func CopyInViews(vs []View, off uint64, p []byte) int {
	var c Cursor
	return c.CopyIn(vs, off, p)
}

// CopyOutViews copies the bytes of vs starting off bytes in into p and
// returns the bytes copied: fewer than len(p) only if vs ends first.
func CopyOutViews(p []byte, vs []View, off uint64) int {
	var c Cursor
	return c.CopyOut(p, vs, off)
}

// Cursor remembers where in a list of views the last copy ended, so a run
// of copies at rising offsets (a message placed piece by piece) does not
// rescan the list from its start. The zero Cursor starts at the first
// view; use one Cursor with one list only.
type Cursor struct {
	i    int    // the view the last copy ended in
	base uint64 // offset of view i in the buffer
}

// CopyIn is CopyInViews, starting its search from the cursor.
func (c *Cursor) CopyIn(vs []View, off uint64, p []byte) int { return c.copy(vs, off, p, true) }

// CopyOut is CopyOutViews, starting its search from the cursor.
func (c *Cursor) CopyOut(p []byte, vs []View, off uint64) int { return c.copy(vs, off, p, false) }

// copy copies between p and the bytes [off, off+len(p)) of vs: into vs if
// into, else out of them.
func (c *Cursor) copy(vs []View, off uint64, p []byte, into bool) int {
	i, base := c.i, c.base
	if i >= len(vs) || off < base {
		i, base = 0, 0
	}
	for i < len(vs) && off >= base+vs[i].Len() {
		base += vs[i].Len()
		i++
	}
	n := 0
	for i < len(vs) && n < len(p) {
		v := vs[i].Bytes()[off+uint64(n)-base:]
		if into {
			n += copy(v, p[n:])
		} else {
			n += copy(p[n:], v)
		}
		if off+uint64(n)-base == vs[i].Len() {
			base += vs[i].Len()
			i++
		}
	}
	c.i, c.base = i, base
	return n
}
