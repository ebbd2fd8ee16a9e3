package remote

import "github.com/vstellar/vstellar/guestmem"

// readViews fills p with the bytes of vs (one buffer in pieces) at off.
// false: the range is not all there, or the memory behind it faulted
// (the guest's memory file was truncated under us).
func readViews(vs []guestmem.View, p []byte, off uint64) bool { return copyViews(vs, off, p, false) }

// writeViews copies p into vs at off; false as for readViews.
func writeViews(vs []guestmem.View, off uint64, p []byte) bool { return copyViews(vs, off, p, true) }

// copyViews copies between p and the bytes of vs at off: into vs if
// into, else out of them.
func copyViews(vs []guestmem.View, off uint64, p []byte, into bool) bool {
	err := guestmem.Guard(func() error {
		for _, v := range vs {
			if len(p) == 0 {
				break
			}
			if n := v.Len(); off >= n {
				off -= n
				continue
			}
			if into {
				p = p[v.CopyIn(off, p):]
			} else {
				p = p[v.CopyOut(p, off):]
			}
			off = 0
		}
		return nil
	})
	return err == nil && len(p) == 0
}
