package remote

import "github.com/vstellar/vstellar/guestmem"

// readViews fills p with the bytes of vs (one buffer in pieces) at off.
// false: the range is not all there, or the memory behind it faulted
// (the guest's memory file was truncated under us).
func readViews(vs []guestmem.View, p []byte, off uint64) bool {
	n := 0
	err := guestmem.Guard(func() error { n = guestmem.CopyOutViews(p, vs, off); return nil })
	return err == nil && n == len(p)
}

// writeViews copies p into vs at off; false as for readViews.
func writeViews(vs []guestmem.View, off uint64, p []byte) bool {
	n := 0
	err := guestmem.Guard(func() error { n = guestmem.CopyInViews(vs, off, p); return nil })
	return err == nil && n == len(p)
}
