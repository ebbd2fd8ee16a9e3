package vhost

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// checkEventFD refuses a kick, call or error descriptor that is not an
// eventfd. The spec only ever passes eventfds here; anything else (a
// character device that always reads, a pipe, a socket) would let a
// front-end spin a ring worker or make our writes block. Linux names an
// eventfd "anon_inode:[eventfd]" in /proc/self/fd.
func checkEventFD(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if st.Mode&unix.S_IFMT != 0 {
		return badPayload("descriptor is not an eventfd (file type %#o)", st.Mode&unix.S_IFMT)
	}
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil // no /proc: the file-type check above is all we can do
	}
	if link != "anon_inode:[eventfd]" {
		return badPayload("descriptor is %s, not an eventfd", link)
	}
	return nil
}
