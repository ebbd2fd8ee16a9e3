package hotplug

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"golang.org/x/sys/unix"
)

// proxy joins go-qemu's SocketMonitor to QEMU through the tap. go-qemu
// only dials an address and keeps the connection to itself, so we dial
// QEMU and let go-qemu dial a private socket whose other end is ours.
// What go-qemu writes is forwarded to QEMU. What it reads is what the
// tap hands out, a whole line per write, except that for a reply it
// reads a stand-in (the tap keeps the reply for the Client), and
// nothing more until release: go-qemu's Run returns a slice of its
// reader's buffer, which the reader's next read overwrites.
//
// Holding alone orders that read after Run in fact (the bytes are not
// in the kernel before release), but not for the race detector, which
// counts a read(2) into a buffer as happening before the read's own
// synchronisation (syscall.Read: WriteRange, then Acquire). So after a
// stand-in the first bytes go-qemu reads are a lone newline, read alone
// (drained): one byte that bufio.Scanner puts either after the
// stand-in, or at the front of its buffer when the stand-in (14 bytes)
// ends past the middle, so never over it; later reads are ordered by
// that one's. A reply itself could be at the front and past the middle,
// hence the stand-in.
//
// Closing either side closes both.
type proxy struct {
	tap  *tap
	peer *net.UnixConn // the end of go-qemu's connection
	addr string        // where go-qemu connected; nobody listens there now
	wg   sync.WaitGroup
}

// standIn is what go-qemu reads for a reply: one that Run takes for
// success and returns; the Client ignores it and takes the reply from
// the tap.
var standIn = []byte("{\"return\":{}}\n")

// openMonitor dials QEMU's QMP socket at path, and a go-qemu
// SocketMonitor to a proxy in front of it. Call start once the caller
// can take onError's calls; the deadline bounds dialing and accepting
// here, not reads (set them on the tap).
func openMonitor(ctx context.Context, path string, deadline time.Time, log *slog.Logger, onError func(error)) (*qmp.SocketMonitor, *proxy, error) {
	d := net.Dialer{Deadline: deadline}
	qc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, nil, err
	}
	ln, err := listenProxy()
	if err != nil {
		qc.Close()
		return nil, nil, err
	}
	defer ln.Close() // one connection only: later ones are refused
	addr := ln.Addr().String()
	// The connect completes into the listener's backlog, before Accept.
	mon, err := qmp.NewSocketMonitor("unix", addr, time.Until(deadline))
	if err != nil {
		qc.Close()
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	peer, err := acceptOwn(ln, deadline, log)
	if err != nil {
		qc.Close()
		mon.Disconnect()
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	return mon, &proxy{tap: newTap(qc, onError), peer: peer, addr: addr}, nil
}

// listenProxy listens on a Linux abstract unix socket with a random
// name: no file to leave behind or to guard with permissions.
func listenProxy() (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: "@vstellar-qmp-" + rand.Text(), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	return ln, nil
}

// acceptOwn accepts the first connection made from this process. The
// random name is unguessable but not secret (abstract names are listed
// in /proc/net/unix), so another process could connect first: the
// kernel's word on the peer's pid (SO_PEERCRED) tells go-qemu's
// connection from a stranger's, which is closed.
func acceptOwn(ln *net.UnixListener, deadline time.Time, log *slog.Logger) (*net.UnixConn, error) {
	if err := ln.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return nil, fmt.Errorf("accept: %w", err)
		}
		pid, err := peerPID(c)
		if err == nil && pid == os.Getpid() {
			return c, nil
		}
		log.Warn("QMP proxy: refused a connection from another process", "addr", ln.Addr().String(), "pid", pid, "err", err)
		c.Close()
	}
}

// peerPID is the pid of the process that made c, as the kernel saw it.
func peerPID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return int(cred.Pid), nil
}

// start starts copying both ways.
func (p *proxy) start() {
	p.wg.Add(2)
	go p.toGoQEMU()
	go p.toQEMU()
}

// toGoQEMU writes what the tap hands out to go-qemu, a whole line at a
// time (stand-ins for replies). It ends on the tap's first error (which
// the tap reports); go-qemu then reads EOF.
func (p *proxy) toGoQEMU() {
	defer p.wg.Done()
	defer p.close()
	buf := make([]byte, 4096)
	var line []byte
	spacer := false // a stand-in went last: a lone newline goes next
	write := func(b []byte) error {
		if spacer {
			spacer = false
			if _, err := p.peer.Write([]byte("\n")); err != nil {
				return err
			}
			if err := p.drained(); err != nil {
				return err
			}
		}
		_, err := p.peer.Write(b)
		return err
	}
	for {
		n, reply, err := p.tap.next(buf)
		if err != nil {
			return
		}
		line = append(line, buf[:n]...)
		switch {
		case reply:
			err = write(standIn)
			spacer = true
		case line[len(line)-1] == '\n':
			err = write(line)
		default:
			continue // the rest of the line is still to come
		}
		if err != nil {
			return // closed: go-qemu's side went, or we closed
		}
		line = line[:0]
	}
}

// drained waits until go-qemu has read all that was written to it. As
// the reader frees what it read, the kernel wakes the writer's poller
// (EPOLLOUT), so this sleeps there; the short deadline is a fallback
// that polls should no wake-up come.
func (p *proxy) drained() error {
	rc, err := p.peer.SyscallConn()
	if err != nil {
		return err
	}
	defer p.peer.SetWriteDeadline(time.Time{})
	for {
		var ioErr error
		p.peer.SetWriteDeadline(time.Now().Add(time.Millisecond))
		err := rc.Write(func(fd uintptr) bool {
			var n int
			n, ioErr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
			return ioErr != nil || n == 0
		})
		switch {
		case err == nil && ioErr != nil:
			return fmt.Errorf("SIOCOUTQ: %w", ioErr)
		case err == nil:
			return nil
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return err
		}
	}
}

// toQEMU forwards go-qemu's commands to QEMU. go-qemu's first write is
// qmp_capabilities, which it sends once it has decoded the greeting.
func (p *proxy) toQEMU() {
	defer p.wg.Done()
	defer p.close()
	buf := make([]byte, 4096)
	spoke := false
	for {
		n, err := p.peer.Read(buf)
		if n > 0 {
			if _, err := p.tap.Write(buf[:n]); err != nil {
				p.tap.end(fmt.Errorf("sending: %w", err))
				return
			}
			if !spoke {
				spoke = true
				p.tap.advance(1)
			}
		}
		if err != nil {
			return // go-qemu disconnected, or we closed
		}
	}
}

// close closes both sides, which ends both copies; it does not wait
// for them (it is called from them, through the tap's onError).
func (p *proxy) close() {
	p.tap.close()
	p.peer.Close()
}

// wait waits for both copies to end, after close.
func (p *proxy) wait() { p.wg.Wait() }
