package vhost

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// This file holds the test harness: a raw front-end that encodes requests
// by hand from the spec's tables (not with this package's encoders, so a
// layout mistake cannot cancel out), and echoDevice, a small Device.

type rawFE struct {
	t *testing.T
	c *net.UnixConn
}

func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sp")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// served is a running Backend.Serve on one end of a socket pair.
type served struct {
	b    *Backend
	fe   *rawFE
	done chan error
}

func serve(t *testing.T, b *Backend) *served {
	t.Helper()
	feConn, beConn := socketPair(t)
	s := &served{b: b, fe: &rawFE{t: t, c: feConn}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- b.Serve(ctx, beConn) }()
	t.Cleanup(func() {
		cancel()
		feConn.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after the front-end closed")
		}
	})
	return s
}

// wait returns Serve's result.
func (s *served) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // keep it for Cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

const (
	vFlag     = 0x1
	replyFlag = 0x4
	needReply = 0x8
)

func (f *rawFE) send(req, flags uint32, payload []byte, fds ...int) {
	f.t.Helper()
	b := make([]byte, 12+len(payload))
	binary.LittleEndian.PutUint32(b[0:], req)
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
	copy(b[12:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := f.c.WriteMsgUnix(b, oob, nil); err != nil {
		f.t.Fatalf("send %d: %v", req, err)
	}
}

// recv reads one reply and returns its header words, payload and fds.
func (f *rawFE) recv() (req, flags uint32, payload []byte, fds []int) {
	f.t.Helper()
	f.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer f.c.SetReadDeadline(time.Time{})
	hdr := make([]byte, 12)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := f.c.ReadMsgUnix(hdr, oob)
	if err != nil || n != 12 {
		f.t.Fatalf("reading reply header: n=%d err=%v", n, err)
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for i := range msgs {
			got, _ := unix.ParseUnixRights(&msgs[i])
			fds = append(fds, got...)
		}
	}
	req, flags = binary.LittleEndian.Uint32(hdr), binary.LittleEndian.Uint32(hdr[4:])
	payload = make([]byte, binary.LittleEndian.Uint32(hdr[8:]))
	if _, err := readFull(f.c, payload); err != nil {
		f.t.Fatalf("reading reply payload: %v", err)
	}
	return req, flags, payload, fds
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// call sends a request that has a reply body and returns the body.
func (f *rawFE) call(req uint32, payload []byte, fds ...int) []byte {
	f.t.Helper()
	f.send(req, vFlag, payload, fds...)
	r, flags, p, rfds := f.recv()
	if r != req || flags != vFlag|replyFlag {
		f.t.Fatalf("reply to %d: request %d flags %#x", req, r, flags)
	}
	for _, fd := range rfds {
		unix.Close(fd)
	}
	return p
}

// ack sends a request with NEED_REPLY and returns the u64 acknowledgement.
func (f *rawFE) ack(req uint32, payload []byte, fds ...int) uint64 {
	f.t.Helper()
	f.send(req, vFlag|needReply, payload, fds...)
	r, flags, p, _ := f.recv()
	if r != req || flags != vFlag|replyFlag || len(p) != 8 {
		f.t.Fatalf("ack for %d: request %d flags %#x %d bytes", req, r, flags, len(p))
	}
	return binary.LittleEndian.Uint64(p)
}

func (f *rawFE) mustAck(req uint32, payload []byte, fds ...int) {
	f.t.Helper()
	if v := f.ack(req, payload, fds...); v != 0 {
		f.t.Fatalf("request %d failed: ack %d", req, v)
	}
}

func (f *rawFE) mustFail(req uint32, payload []byte, fds ...int) {
	f.t.Helper()
	if v := f.ack(req, payload, fds...); v == 0 {
		f.t.Fatalf("request %d succeeded, want an error ack", req)
	}
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func state(idx, num uint32) []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, idx), num)
}

// vringAddr encodes SET_VRING_ADDR: index, flags, desc, USED, AVAIL, log.
func vringAddr(idx uint32, desc, used, avail uint64) []byte {
	b := state(idx, 0)
	for _, v := range []uint64{desc, used, avail, 0} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func memTable(regions ...[4]uint64) []byte {
	b := state(uint32(len(regions)), 0)
	for _, r := range regions {
		for _, v := range r {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	return b
}

func singleRegion(r [4]uint64) []byte {
	b := make([]byte, 8)
	for _, v := range r {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// waitEvent waits until the eventfd has been signalled and consumes it.
func waitEvent(t *testing.T, fd int) {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 5000); err != nil || n != 1 {
		t.Fatalf("eventfd %d not signalled (n=%d err=%v)", fd, n, err)
	}
	var b [8]byte
	unix.Read(fd, b[:])
}

func signalled(fd int, within time.Duration) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(pfd, int(within/time.Millisecond))
	if n == 1 {
		var b [8]byte
		unix.Read(fd, b[:])
	}
	return n == 1
}

// echoDevice copies each request's readable bytes into its writable part.
// Queue 0 echoes; queue 1 echoes with the bytes inverted.
type echoDevice struct {
	mu          sync.Mutex
	activations int
	deactivated []bool
	mapErr      error
	shm         int // memfd mapped through SHMEM_MAP on activation
	processed   int
}

func newEchoDevice(t *testing.T) *echoDevice {
	fd, err := unix.MemfdCreate("vstellar-test:echo-shm", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, 4096)
	t.Cleanup(func() { unix.Close(fd) })
	return &echoDevice{shm: fd}
}

func (d *echoDevice) NumQueues() int       { return 2 }
func (d *echoDevice) MaxQueueSize() uint16 { return 256 }
func (d *echoDevice) Features() uint64 {
	return virtio.FeatureMask(virtio.FeatureVersion1, virtio.FeatureEventIdx, virtio.FeatureIndirectDesc) | 1<<3
}
func (d *echoDevice) ConfigSize() uint32 { return 16 }
func (d *echoDevice) ReadConfig(off uint32, buf []byte) {
	for i := range buf {
		buf[i] = byte(off) + byte(i) + 0xa0
	}
}
func (d *echoDevice) WriteConfig(off uint32, data []byte) error {
	return errors.New("read-only config")
}
func (d *echoDevice) ShmemRegions() []uint64 { return []uint64{4096} }
func (d *echoDevice) ShmemFiles() []int      { return []int{d.shm} }

func (d *echoDevice) Activate(ctx context.Context, env Env) error {
	err := env.MapShmem(ctx, ShmemMapping{ShmID: 0, Len: 4096, Writable: true}, d.shm)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.activations++
	d.mapErr = err
	return nil
}

func (d *echoDevice) ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	for {
		c, ok, err := q.Pop()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		buf := make([]byte, c.ReadableLen)
		c.ReadAll(buf)
		if idx == 1 {
			for i := range buf {
				buf[i] = ^buf[i]
			}
		}
		q.Push(c.Head, c.WriteAll(buf))
		d.mu.Lock()
		d.processed++
		d.mu.Unlock()
	}
}

func (d *echoDevice) Deactivate(reset bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deactivated = append(d.deactivated, reset)
}

func (d *echoDevice) snapshot() (activations int, deactivated []bool, processed int, mapErr error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.activations, append([]bool(nil), d.deactivated...), d.processed, d.mapErr
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no /proc/self/fd: %v", err)
		}
		t.Skipf("no /proc/self/fd (fd-leak check needs it): %v", err)
	}
	return len(ents)
}
