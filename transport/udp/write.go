package udp

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GSO limits: the kernel takes at most 64 segments per send
// (UDP_MAX_SEGMENTS on older kernels) and one IP packet's worth of
// payload in total.
const (
	maxGSOSegments = 64
	maxGSOBytes    = MaxDatagram
)

// writer is WriteBatch's scratch space, preallocated at Listen so that a
// send allocates nothing. Guarded by mu.
type writer struct {
	mu     sync.Mutex
	c      *Conn
	fn     func(uintptr) bool // w.attempt as a value, built once
	hdrs   []unix.Mmsghdr
	iovs   []unix.Iovec
	sas    []rawSockaddr
	oob    []byte // segmentCmsgSpace per header
	counts []int  // datagrams carried by each header

	// In/out of one attempt (fn takes no arguments).
	fd, nh, pos int
	err         error
	// nowait: a full socket buffer ends the call (TryWriteBatch), and
	// blocked says it did.
	nowait, blocked bool
}

func (w *writer) init(c *Conn, maxBatch int) {
	w.c = c
	w.fn = w.attempt
	w.hdrs = make([]unix.Mmsghdr, maxBatch)
	w.iovs = make([]unix.Iovec, maxBatch)
	w.sas = make([]rawSockaddr, maxBatch)
	w.oob = alignedBytes(maxBatch * segmentCmsgSpace)
	w.counts = make([]int, maxBatch)
}

// WriteBatch sends msgs[i].Buf[:N] to msgs[i].Addr from path msgs[i].Path
// (source port base+Path), in order, and returns how many it sent: on
// error, msgs[:n] were sent and msgs[n] was not. Each run of consecutive
// messages on one path takes one sendmmsg call (per Config.MaxBatch
// messages), so callers that batch should group messages by path. With
// GSO, consecutive messages of one run to one peer whose lengths are equal
// (the last may be shorter) go to the kernel as one segmented send.
// WriteBatch blocks only while the socket buffer is full.
func (c *Conn) WriteBatch(msgs []Message) (int, error) {
	w := &c.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.writeBatch(msgs)
}

// TryWriteBatch is WriteBatch for a caller that must not wait: it sends
// msgs[:n] at once and stops before the first message that would wait
// for socket buffer space, or sends nothing while another WriteBatch or
// TryWriteBatch is in progress; neither is an error. Its errors are
// WriteBatch's.
func (c *Conn) TryWriteBatch(msgs []Message) (n int, err error) {
	w := &c.wr
	if !w.mu.TryLock() {
		return 0, nil
	}
	defer w.mu.Unlock()
	w.nowait = true
	n, err = c.writeBatch(msgs)
	w.nowait = false
	return n, err
}

// writeBatch is WriteBatch's body. Called with wr.mu.
func (c *Conn) writeBatch(msgs []Message) (int, error) {
	w := &c.wr
	w.blocked = false
	sent := 0
	for sent < len(msgs) {
		if !c.validMessage(&msgs[sent]) {
			return sent, c.messageError(sent, &msgs[sent])
		}
		path := msgs[sent].Path
		end := sent + 1
		for end < len(msgs) && end-sent < len(w.hdrs) &&
			msgs[end].Path == path && c.validMessage(&msgs[end]) {
			end++
		}
		n, err := w.send(path, msgs[sent:end])
		sent += n
		if err != nil || w.blocked {
			return sent, err
		}
	}
	return sent, nil
}

// validMessage reports whether m can be sent; messageError says why not.
func (c *Conn) validMessage(m *Message) bool {
	if m.Path < 0 || m.Path >= len(c.socks) || m.N < 0 || m.N > len(m.Buf) || m.N > MaxDatagram {
		return false
	}
	ip := m.Addr.Addr()
	if !m.Addr.IsValid() || m.Addr.Port() == 0 || ip.IsUnspecified() {
		return false
	}
	if c.v6 {
		return ip.Is6() && !ip.Is4In6()
	}
	return ip.Is4() || ip.Is4In6()
}

func (c *Conn) messageError(i int, m *Message) error {
	var why string
	ip := m.Addr.Addr()
	switch {
	case m.Path < 0 || m.Path >= len(c.socks):
		why = fmt.Sprintf("path %d outside 0..%d", m.Path, len(c.socks)-1)
	case m.N < 0 || m.N > len(m.Buf):
		why = fmt.Sprintf("N %d outside 0..len(Buf)=%d", m.N, len(m.Buf))
	case m.N > MaxDatagram:
		why = fmt.Sprintf("N %d exceeds the largest datagram %d", m.N, MaxDatagram)
	case !m.Addr.IsValid() || m.Addr.Port() == 0 || ip.IsUnspecified():
		why = fmt.Sprintf("destination %v is not an address and port", m.Addr)
	default:
		fam := "IPv4"
		if c.v6 {
			fam = "IPv6"
		}
		why = fmt.Sprintf("destination %v is not %s like the local address", m.Addr, fam)
	}
	return fmt.Errorf("%w: message %d: %s", ErrBadMessage, i, why)
}

// send sends one run of valid messages on one path, falling back to one
// datagram per message if the kernel refuses a segmented send.
func (w *writer) send(path int, run []Message) (int, error) {
	gso := w.c.gso.Load()
	total := 0
	for {
		n, gsoFailed, err := w.sendOnce(path, run, gso)
		total += n
		if err == nil || !gsoFailed {
			return total, err
		}
		// The kernel refused a segmented send: EIO when the device
		// cannot checksum-offload (then it never will: stop using GSO),
		// EINVAL when a segment exceeds the path MTU (that run only).
		// Send the rest again one datagram per message.
		w.c.stats.gsoFallbacks.Add(1)
		if errors.Is(err, unix.EIO) && w.c.gso.CompareAndSwap(true, false) {
			w.c.log.Warn("udp: kernel refused GSO send, disabling GSO", "addr", w.c.LocalAddr(path), "err", err)
		}
		run = run[n:]
		gso = false
	}
}

// sendOnce builds the headers for run and sends them. gsoFailed reports
// that the failing header carried several datagrams.
func (w *writer) sendOnce(path int, run []Message, gso bool) (sent int, gsoFailed bool, err error) {
	c := w.c
	h, iv := 0, 0
	for i := 0; i < len(run); {
		m := &run[i]
		scope, err := c.scopeOf(m)
		if err != nil {
			if h == 0 {
				return 0, false, fmt.Errorf("%w: %v", ErrBadMessage, err)
			}
			break // send what precedes it; the next call reports it
		}
		sa := &w.sas[h]
		namelen := sa.encode(c.v6, m.Addr, scope)
		w.iovs[iv] = unix.Iovec{Base: unsafe.SliceData(m.Buf)}
		w.iovs[iv].SetLen(m.N)
		cnt, bytes, seg := 1, m.N, m.N
		i++
		if gso && seg > 0 {
			for i < len(run) && cnt < maxGSOSegments {
				n := &run[i]
				if n.Addr != m.Addr || n.N == 0 || n.N > seg || bytes+n.N > maxGSOBytes {
					break
				}
				w.iovs[iv+cnt] = unix.Iovec{Base: unsafe.SliceData(n.Buf)}
				w.iovs[iv+cnt].SetLen(n.N)
				cnt++
				bytes += n.N
				i++
				if n.N < seg {
					break // only the last segment may be short
				}
			}
		}
		hdr := &w.hdrs[h]
		*hdr = unix.Mmsghdr{}
		hdr.Hdr.Name = sa.ptr()
		hdr.Hdr.Namelen = namelen
		hdr.Hdr.Iov = &w.iovs[iv]
		hdr.Hdr.SetIovlen(cnt)
		if cnt > 1 {
			off := h * segmentCmsgSpace
			hdr.Hdr.Control = &w.oob[off]
			hdr.Hdr.SetControllen(putSegmentCmsg(w.oob[off:], uint16(seg)))
		}
		w.counts[h] = cnt
		h++
		iv += cnt
	}
	w.fd, w.nh, w.pos, w.err = c.socks[path].fd, h, 0, nil
	werr := c.socks[path].raw.Write(w.fn)
	clear(w.iovs[:iv]) // keep no reference to the caller's buffers
	for j := range w.pos {
		sent += w.counts[j]
		if w.counts[j] > 1 {
			c.stats.gsoSends.Add(1)
			c.stats.gsoDatagrams.Add(uint64(w.counts[j]))
		}
	}
	if w.err != nil {
		return sent, w.counts[w.pos] > 1, fmt.Errorf("udp: send from %v: %w", c.LocalAddr(path), w.err)
	}
	if werr != nil {
		return sent, false, c.mapErr(fmt.Errorf("udp: send: %w", werr))
	}
	if w.blocked {
		return sent, false, nil
	}
	// A message whose zone did not resolve stopped the headers early.
	if rest := run[sent:]; len(rest) > 0 && w.pos == h {
		n, failed, err := w.sendOnce(path, rest, gso)
		return sent + n, failed, err
	}
	return sent, false, nil
}

// attempt sends w.hdrs[w.pos:w.nh]; it returns false (wait for buffer
// space) on EAGAIN, or true with blocked set if it must not wait.
func (w *writer) attempt(uintptr) bool {
	for w.pos < w.nh {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(w.fd),
			uintptr(unsafe.Pointer(&w.hdrs[w.pos])), uintptr(w.nh-w.pos), 0, 0, 0)
		switch e {
		case 0:
			w.pos += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			if w.nowait {
				w.blocked = true
				return true
			}
			return false
		default:
			w.err = fmt.Errorf("sendmmsg: %w", e)
			return true
		}
	}
	return true
}

// scopeOf returns the IPv6 scope id for m's destination: the zone's
// interface index, or the bound interface's for an unzoned link-local.
func (c *Conn) scopeOf(m *Message) (uint32, error) {
	if !c.v6 {
		return 0, nil
	}
	zone := m.Addr.Addr().Zone()
	switch {
	case zone == "":
		if m.Addr.Addr().IsLinkLocalUnicast() {
			return c.ifindex, nil
		}
		return 0, nil
	case zone == c.zone:
		return c.ifindex, nil
	}
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(zone) // rare: a zone of another interface
	if err != nil {
		return 0, fmt.Errorf("destination %v: zone: %v", m.Addr, err)
	}
	return uint32(ifi.Index), nil
}
