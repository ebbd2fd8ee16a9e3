package udp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// portRangeTries bounds the search for Paths consecutive free ports when
// Config.Addr has port 0.
const portRangeTries = 64

// socket is one path: a non-blocking UDP socket bound to base+index,
// registered with the Go runtime's poller through its *os.File.
type socket struct {
	fd   int
	file *os.File
	raw  syscall.RawConn
}

// Conn is a set of UDP sockets bound to consecutive ports on one local
// address, one per path, read and written in batches. ReadBatch and
// WriteBatch may run concurrently with each other and with Close; two
// ReadBatch (or two WriteBatch) calls are serialized.
type Conn struct {
	log     *slog.Logger
	v6      bool
	addr    netip.Addr // bound address, maybe unspecified
	base    uint16
	zone    string // interface name for IPv6 scope ids, if bound to one
	ifindex uint32
	socks   []socket
	// poll is what a blocked ReadBatch waits on: the epoll instance over
	// all sockets, or the only socket when there is one path.
	epoll   *os.File
	epfd    int
	pollRaw syscall.RawConn
	gso     atomic.Bool
	gro     bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stopCtx   func() bool

	stats counters
	rd    reader
	wr    writer
}

// Listen opens cfg.Paths UDP sockets bound to consecutive ports starting at
// cfg.Addr (or at a free base port if cfg.Addr has port 0). The Conn is
// closed when ctx is done or Close is called.
func Listen(ctx context.Context, cfg Config) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("udp: listen %v: %w", cfg.Addr, err)
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	c := &Conn{
		log:  cfg.Logger,
		v6:   cfg.Addr.Addr().Is6(),
		addr: cfg.Addr.Addr(),
		epfd: -1,
	}
	ifname := cfg.Interface
	if ifname == "" {
		ifname = cfg.Addr.Addr().Zone()
	}
	if ifname != "" {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrUnknownInterface, ifname, err)
		}
		c.zone, c.ifindex = ifi.Name, uint32(ifi.Index)
	}
	fds, base, err := c.bindRange(cfg)
	if err != nil {
		return nil, err
	}
	c.base = base
	if err := c.setup(cfg, fds); err != nil {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		c.closeFiles()
		return nil, err
	}
	c.stopCtx = context.AfterFunc(ctx, func() { c.Close() })
	c.log.Debug("udp: listening", "addr", c.LocalAddr(0), "paths", len(c.socks),
		"gso", c.gso.Load(), "gro", c.gro, "interface", c.zone)
	return c, nil
}

// setup wraps the bound sockets in *os.File (handing them to the Go
// poller), builds the epoll set and the batch scratch space. On error the
// caller closes whatever fds are not yet owned by a file (fds[i] == -1 once
// owned).
func (c *Conn) setup(cfg Config, fds []int) error {
	c.gso.Store(!cfg.DisableGSO && probeGSO(fds[0]))
	c.gro = !cfg.DisableGRO
	if c.gro {
		for i, fd := range fds {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
				if i == 0 {
					c.gro = false // not supported: fall back
					break
				}
				return fmt.Errorf("udp: enable UDP_GRO on path %d: %w", i, err)
			}
		}
	}
	c.socks = make([]socket, 0, len(fds))
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("udp:%v:%d", c.addr, int(c.base)+i))
		fds[i] = -1 // owned by f from here
		raw, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return fmt.Errorf("udp: path %d: %w", i, err)
		}
		c.socks = append(c.socks, socket{fd: fd, file: f, raw: raw})
	}
	if len(c.socks) == 1 {
		c.pollRaw = c.socks[0].raw
	} else {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("udp: epoll_create1: %w", err)
		}
		// Non-blocking so that os.NewFile registers it with the runtime
		// poller: an epoll fd is itself pollable (readable when any of
		// its sockets is).
		if err := unix.SetNonblock(epfd, true); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("udp: epoll set non-blocking: %w", err)
		}
		c.epoll = os.NewFile(uintptr(epfd), "udp:epoll")
		c.epfd = epfd
		for i, s := range c.socks {
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
			if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
				return fmt.Errorf("udp: epoll add path %d: %w", i, err)
			}
		}
		raw, err := c.epoll.SyscallConn()
		if err != nil {
			return fmt.Errorf("udp: epoll: %w", err)
		}
		c.pollRaw = raw
	}
	c.rd.init(c, cfg.MaxBatch, len(c.socks))
	c.wr.init(c, cfg.MaxBatch)
	return nil
}

// probeGSO reports whether the kernel knows UDP_SEGMENT (Linux >= 4.18).
func probeGSO(fd int) bool {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// bindRange opens and binds one socket per path. With a fixed base port it
// binds exactly base..base+Paths-1; with port 0 it lets the kernel pick a
// base and retries until the following ports are free too.
func (c *Conn) bindRange(cfg Config) ([]int, uint16, error) {
	n := cfg.Paths
	closeAll := func(fds []int) {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if p := cfg.Addr.Port(); p != 0 {
		fds := make([]int, 0, n)
		for i := range n {
			fd, err := c.openSocket(cfg, i)
			if err == nil {
				err = c.bind(fd, int(p)+i)
				if err != nil {
					unix.Close(fd)
				}
			}
			if err != nil {
				closeAll(fds)
				return nil, 0, err
			}
			fds = append(fds, fd)
		}
		return fds, p, nil
	}
	for range portRangeTries {
		fds := make([]int, 0, n)
		fd, err := c.openSocket(cfg, 0)
		if err != nil {
			return nil, 0, err
		}
		fds = append(fds, fd)
		if err := c.bind(fd, 0); err != nil {
			closeAll(fds)
			return nil, 0, err
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			closeAll(fds)
			return nil, 0, fmt.Errorf("udp: getsockname: %w", err)
		}
		var base int
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			base = sa.Port
		case *unix.SockaddrInet6:
			base = sa.Port
		}
		if base == 0 || base+n-1 > 65535 {
			closeAll(fds)
			continue
		}
		retry := false
		for i := 1; i < n; i++ {
			fd, err := c.openSocket(cfg, i)
			if err != nil {
				closeAll(fds)
				return nil, 0, err
			}
			fds = append(fds, fd)
			if err := c.bind(fd, base+i); err != nil {
				closeAll(fds)
				if errors.Is(err, ErrPortInUse) {
					retry = true
					break
				}
				return nil, 0, err
			}
		}
		if !retry {
			return fds, uint16(base), nil
		}
	}
	return nil, 0, fmt.Errorf("%w: no %d consecutive free ports on %v after %d tries",
		ErrPortInUse, n, cfg.Addr.Addr(), portRangeTries)
}

// openSocket creates path i's socket and sets every option that must
// precede bind.
func (c *Conn) openSocket(cfg Config, i int) (int, error) {
	family := unix.AF_INET
	if c.v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("udp: socket for path %d: %w", i, err)
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	if c.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail(fmt.Errorf("udp: IPV6_V6ONLY: %w", err))
		}
	}
	if cfg.Interface != "" {
		if err := unix.BindToDevice(fd, cfg.Interface); err != nil {
			if errors.Is(err, unix.ENODEV) {
				return fail(fmt.Errorf("%w: %q: %v", ErrUnknownInterface, cfg.Interface, err))
			}
			return fail(fmt.Errorf("udp: SO_BINDTODEVICE %q: %w", cfg.Interface, err))
		}
	}
	if cfg.RecvBuffer > 0 {
		if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, cfg.RecvBuffer); err != nil {
			return fail(fmt.Errorf("udp: receive buffer %d: %w", cfg.RecvBuffer, err))
		}
	}
	if cfg.SendBuffer > 0 {
		if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, cfg.SendBuffer); err != nil {
			return fail(fmt.Errorf("udp: send buffer %d: %w", cfg.SendBuffer, err))
		}
	}
	return fd, nil
}

// setBuffer sets a socket buffer size, first with the FORCE option (which
// ignores net.core.[rw]mem_max but needs CAP_NET_ADMIN), then with the
// plain one (capped at the sysctl).
func setBuffer(fd, force, plain, size int) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

// bind binds fd to c.addr:port, mapping errno to this package's errors.
func (c *Conn) bind(fd, port int) error {
	var sa unix.Sockaddr
	if c.v6 {
		sa = &unix.SockaddrInet6{Port: port, Addr: c.addr.As16(), ZoneId: c.ifindex}
	} else {
		sa = &unix.SockaddrInet4{Port: port, Addr: c.addr.As4()}
	}
	err := unix.Bind(fd, sa)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EADDRINUSE):
		return fmt.Errorf("%w: %v", ErrPortInUse, netip.AddrPortFrom(c.addr, uint16(port)))
	case errors.Is(err, unix.EADDRNOTAVAIL):
		return fmt.Errorf("%w: %v is not assigned to this host: %v", ErrBadAddress, c.addr, err)
	case errors.Is(err, unix.EINVAL) && c.v6 && c.addr.IsLinkLocalUnicast() && c.ifindex == 0:
		return fmt.Errorf("%w: link-local %v needs a zone or Interface: %v", ErrBadAddress, c.addr, err)
	}
	return fmt.Errorf("udp: bind %v: %w", netip.AddrPortFrom(c.addr, uint16(port)), err)
}

// Paths returns the number of paths (source ports).
func (c *Conn) Paths() int { return len(c.socks) }

// LocalAddr returns the address path i is bound to (port base+i), or the
// zero AddrPort if i is out of range.
func (c *Conn) LocalAddr(i int) netip.AddrPort {
	if i < 0 || i >= len(c.socks) {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(c.addr, c.base+uint16(i))
}

// Offload reports the segmentation offloads in use.
func (c *Conn) Offload() Offload { return Offload{GSO: c.gso.Load(), GRO: c.gro} }

// Stats returns a snapshot of the Conn's counters.
func (c *Conn) Stats() Stats { return c.stats.snapshot() }

// SocketBuffers returns the kernel's receive and send buffer sizes of path
// 0's socket (as getsockopt reports them: twice the requested size, for
// the kernel's bookkeeping).
func (c *Conn) SocketBuffers() (recv, send int, err error) {
	if c.closed.Load() {
		return 0, 0, net.ErrClosed
	}
	var rerr, serr error
	err = c.socks[0].raw.Control(func(fd uintptr) {
		recv, rerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		send, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	if err = errors.Join(err, rerr, serr); err != nil {
		return 0, 0, fmt.Errorf("udp: socket buffers: %w", err)
	}
	return recv, send, nil
}

// SetReadDeadline makes a ReadBatch blocked at or after t return an error
// wrapping os.ErrDeadlineExceeded. The zero time means no deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	var f *os.File
	if c.epoll != nil {
		f = c.epoll
	} else {
		f = c.socks[0].file
	}
	return c.mapErr(f.SetReadDeadline(t))
}

// SetWriteDeadline bounds how long a WriteBatch waits for socket buffer
// space; the zero time means no deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	for _, s := range c.socks {
		if err := s.file.SetWriteDeadline(t); err != nil {
			return c.mapErr(err)
		}
	}
	return nil
}

// Close closes every socket. A ReadBatch or WriteBatch blocked on the Conn
// returns an error wrapping net.ErrClosed, as does every later call. Close
// is idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.stopCtx != nil {
			c.stopCtx()
		}
		c.closeErr = c.closeFiles()
		c.log.Debug("udp: closed", "addr", c.LocalAddr(0))
	})
	return c.closeErr
}

// closeFiles closes the epoll instance first: that wakes a blocked reader
// and waits until no reader is inside a read attempt, so no read touches a
// socket fd after it is closed. Closing a socket's file likewise waits for
// writers using it.
func (c *Conn) closeFiles() error {
	var errs []error
	if c.epoll != nil {
		errs = append(errs, c.epoll.Close())
	}
	for _, s := range c.socks {
		errs = append(errs, s.file.Close())
	}
	return errors.Join(errs...)
}

// mapErr turns the os package's closed-file error into net.ErrClosed, the
// error network code tests for.
func (c *Conn) mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrClosed) || c.closed.Load() {
		return fmt.Errorf("udp: %w", net.ErrClosed)
	}
	return err
}
