package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// groBuffers is how many 64 KiB buffers a Conn with GRO receives
// coalesced datagrams into; groBufSize holds the largest UDP payload.
const (
	groBuffers = 8
	groBufSize = 1 << 16
)

// pending is a received (possibly coalesced) buffer not yet fully handed
// to the caller: bytes [off, end) of the GRO buffer space, in segments of
// seg bytes (0: one datagram).
type pending struct {
	off, end, seg int
	addr          netip.AddrPort
	path          int
}

// reader is ReadBatch's scratch space, preallocated at Listen so that a
// read allocates nothing. Guarded by mu.
type reader struct {
	mu   sync.Mutex
	c    *Conn
	fn   func(uintptr) bool // c.attempt as a value, built once
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	sas  []rawSockaddr
	oob  []byte // groCmsgSpace per message, GRO only
	evs  []unix.EpollEvent
	rr   int // round-robin start over ready paths

	// GRO: received buffers and the segments not yet delivered.
	gbuf            []byte
	pend            []pending
	pendHead, pendN int

	// In/out of one attempt (fn takes no arguments).
	msgs []Message
	n    int
	err  error
}

func (r *reader) init(c *Conn, maxBatch, paths int) {
	r.c = c
	r.fn = r.attempt
	r.hdrs = make([]unix.Mmsghdr, maxBatch)
	r.iovs = make([]unix.Iovec, maxBatch)
	r.sas = make([]rawSockaddr, maxBatch)
	r.evs = make([]unix.EpollEvent, paths)
	if c.gro {
		r.oob = alignedBytes(groBuffers * groCmsgSpace)
		r.gbuf = make([]byte, groBuffers*groBufSize)
		r.pend = make([]pending, groBuffers)
	}
}

// ReadBatch receives datagrams into msgs, blocking until at least one
// arrives (or the read deadline passes: os.ErrDeadlineExceeded itself,
// allocating nothing; or the Conn is closed). It returns
// how many of msgs it filled: msgs[:n] have Buf[:N], Addr and Path set.
//
// A datagram longer than the Buf it would go into is dropped and counted
// in Stats.Truncated, never delivered cut short. Dropping one may reorder
// the Buf slices among msgs (later datagrams move up by swapping Bufs), so
// read each msgs[i].Buf afresh after the call. At most Config.MaxBatch
// datagrams are read per call; msgs entries with empty Buf take only empty
// datagrams.
func (c *Conn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r := &c.rd
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(msgs) > len(r.hdrs) {
		msgs = msgs[:len(r.hdrs)]
	}
	r.msgs, r.n, r.err = msgs, 0, nil
	err := c.pollRaw.Read(r.fn)
	n, rerr := r.n, r.err
	r.msgs = nil
	if n > 0 {
		return n, nil
	}
	if rerr != nil {
		return 0, c.mapErr(fmt.Errorf("udp: read: %w", rerr))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && !c.closed.Load() {
		// A read deadline is how a caller's loop wakes up (timers,
		// new work): the sentinel as it is, not a wrapped copy that
		// would allocate on every wake-up.
		return 0, os.ErrDeadlineExceeded
	}
	if err != nil {
		return 0, c.mapErr(fmt.Errorf("udp: read: %w", err))
	}
	return 0, nil
}

// attempt is one non-blocking try at filling r.msgs. It returns false to
// make the runtime park the reader until the poll fd is readable again,
// which it only does after seeing nothing ready, so no wakeup is lost.
func (r *reader) attempt(uintptr) bool {
	n, err := r.tryRead(r.msgs)
	if n > 0 || err != nil {
		r.n, r.err = n, err
		return true
	}
	return false
}

func (r *reader) tryRead(msgs []Message) (int, error) {
	c := r.c
	filled := 0
	if r.pendN > 0 {
		filled = r.drain(msgs)
		if filled > 0 || r.pendN > 0 {
			return filled, nil
		}
	}
	if len(c.socks) == 1 {
		return r.recv(0, msgs)
	}
	for {
		k, err := unix.EpollWait(c.epfd, r.evs, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("epoll_wait: %w", err)
		}
		if k == 0 {
			return filled, nil
		}
		// Start at a rotating ready path so one busy path does not
		// starve the others.
		start := r.rr % k
		r.rr++
		for j := range k {
			path := int(r.evs[(start+j)%k].Fd)
			got, err := r.recv(path, msgs[filled:])
			filled += got
			if err != nil {
				if filled > 0 {
					return filled, nil
				}
				return 0, err
			}
			// Stop when full, or when GRO segments are still waiting:
			// the GRO buffers are busy until those are delivered.
			if filled == len(msgs) || r.pendN > 0 {
				return filled, nil
			}
		}
		if filled > 0 {
			return filled, nil
		}
		// Every ready path yielded only dropped datagrams: look again
		// before parking, since the runtime will not wake us for data
		// that was already there.
	}
}

// prepare points receive header i at n bytes from buf and at sockaddr
// slot i, and returns it for extras (control messages).
func (r *reader) prepare(i int, buf *byte, n int) *unix.Msghdr {
	r.iovs[i] = unix.Iovec{Base: buf}
	r.iovs[i].SetLen(n)
	r.hdrs[i] = unix.Mmsghdr{}
	h := &r.hdrs[i].Hdr
	h.Name = r.sas[i].ptr()
	h.Namelen = sockaddrSize
	h.Iov = &r.iovs[i]
	h.SetIovlen(1)
	return h
}

// recv drains up to len(msgs) datagrams from one path without blocking.
// It returns 0, nil when the socket has nothing.
func (r *reader) recv(path int, msgs []Message) (int, error) {
	if r.c.gro {
		return r.recvGRO(path, msgs)
	}
	fd := r.c.socks[path].fd
	for {
		n := len(msgs)
		for i := range n {
			r.prepare(i, unsafe.SliceData(msgs[i].Buf), len(msgs[i].Buf))
		}
		got, err := recvmmsg(fd, r.hdrs[:n])
		clear(r.iovs[:n]) // keep no reference to the caller's buffers
		if err != nil {
			return 0, err
		}
		if got == 0 {
			return 0, nil
		}
		w := 0
		for j := range got {
			hdr := &r.hdrs[j]
			ap, scope, ok := r.sas[j].decode(hdr.Hdr.Namelen)
			if hdr.Hdr.Flags&unix.MSG_TRUNC != 0 || !ok {
				r.c.stats.truncated.Add(1)
				continue
			}
			if w != j {
				msgs[w].Buf, msgs[j].Buf = msgs[j].Buf, msgs[w].Buf
			}
			msgs[w].N = int(hdr.Len)
			msgs[w].Addr = r.c.withZone(ap, scope)
			msgs[w].Path = path
			w++
		}
		if w > 0 || got < n {
			return w, nil
		}
		// A full batch of dropped datagrams: the socket may hold more.
	}
}

// recvGRO receives into the Conn's 64 KiB buffers (a coalesced receive can
// carry up to 64 datagrams) and splits them into msgs, keeping what does
// not fit for the next call. Called only with no segments pending.
func (r *reader) recvGRO(path int, msgs []Message) (int, error) {
	fd := r.c.socks[path].fd
	n := min(len(msgs), groBuffers)
	for {
		for i := range n {
			h := r.prepare(i, &r.gbuf[i*groBufSize], groBufSize)
			h.Control = &r.oob[i*groCmsgSpace]
			h.SetControllen(groCmsgSpace)
		}
		got, err := recvmmsg(fd, r.hdrs[:n])
		if err != nil {
			return 0, err
		}
		if got == 0 {
			return 0, nil
		}
		r.pendHead, r.pendN = 0, 0
		for j := range got {
			hdr := &r.hdrs[j]
			ap, scope, ok := r.sas[j].decode(hdr.Hdr.Namelen)
			if hdr.Hdr.Flags&unix.MSG_TRUNC != 0 || !ok {
				r.c.stats.truncated.Add(1)
				continue
			}
			size := int(hdr.Len)
			seg := parseGROSize(r.oob[j*groCmsgSpace : j*groCmsgSpace+int(hdr.Hdr.Controllen)])
			if seg >= size {
				seg = 0
			}
			if seg > 0 {
				r.c.stats.groBuffers.Add(1)
				r.c.stats.groDatagrams.Add(uint64((size + seg - 1) / seg))
			}
			r.pend[r.pendN] = pending{
				off: j * groBufSize, end: j*groBufSize + size, seg: seg,
				addr: r.c.withZone(ap, scope), path: path,
			}
			r.pendN++
		}
		filled := r.drain(msgs)
		if filled > 0 || got < n || r.pendN > 0 {
			return filled, nil
		}
	}
}

// drain hands pending segments to msgs, dropping (and counting) any that
// do not fit their Buf.
func (r *reader) drain(msgs []Message) int {
	filled := 0
	for r.pendHead < r.pendN && filled < len(msgs) {
		p := &r.pend[r.pendHead]
		end := p.end
		if p.seg > 0 && p.off+p.seg < end {
			end = p.off + p.seg
		}
		size := end - p.off
		m := &msgs[filled]
		if size > len(m.Buf) {
			r.c.stats.truncated.Add(1)
		} else {
			copy(m.Buf, r.gbuf[p.off:end])
			m.N, m.Addr, m.Path = size, p.addr, p.path
			filled++
		}
		p.off = end
		if p.off >= p.end {
			r.pendHead++
		}
	}
	if r.pendHead == r.pendN {
		r.pendHead, r.pendN = 0, 0
	}
	return filled
}

// recvmmsg receives into hdrs without blocking; EAGAIN is 0, nil.
func recvmmsg(fd int, hdrs []unix.Mmsghdr) (int, error) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd),
			uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		}
		return 0, fmt.Errorf("recvmmsg: %w", e)
	}
}

// withZone gives a received IPv6 link-local source the zone of the
// interface it came in on, so that replying to it reaches the same link.
func (c *Conn) withZone(ap netip.AddrPort, scope uint32) netip.AddrPort {
	if scope == 0 || !ap.Addr().Is6() {
		return ap
	}
	zone := c.zone
	if scope != c.ifindex || zone == "" {
		zone = strconv.FormatUint(uint64(scope), 10) // rare: unbound link-local
	}
	return netip.AddrPortFrom(ap.Addr().WithZone(zone), ap.Port())
}
