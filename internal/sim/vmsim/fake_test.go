package vmsim

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// fakeBackend is a small vhost-user back-end written for these tests with
// its own framing (it shares nothing with package frontend). It records
// every request code, keeps the state a back-end must, maps guest RAM from
// the fds it gets and serves queue 0 as an "uppercase echo" device with
// package virtio's DeviceQueue.
type fakeBackend struct {
	t        *testing.T
	ln       *net.UnixListener
	path     string
	features uint64
	protocol uint64
	nq       int
	shmSize  uint64

	hold sync.Mutex // held around every reply, so a test can delay them

	mu       sync.Mutex
	log      []uint32
	regions  []fakeRegion // from SET_MEM_TABLE / ADD_MEM_REG, in order received
	bases    map[uint32]uint32
	status   uint64
	conn     *net.UnixConn
	chanConn *net.UnixConn // back-end channel
	workers  map[uint32]*fakeWorker
	connDone chan struct{}
}

type fakeRegion struct {
	GPA, Size, UVA, Off uint64
	m                   *guestmem.Mapping
}

type fakeWorker struct {
	stop atomic.Bool
	done chan struct{}
	dq   *virtio.DeviceQueue
}

type vringSetup struct {
	num               uint32
	desc, used, avail uint64
	kick, call        int
	base              uint32
	haveAddr, enabled bool
}

const fakeFeatures = 1<<32 | 1<<29 | 1<<28 | 1<<30 | 1<<0

const fakeProtocol = 1<<0 | 1<<3 | 1<<5 | 1<<9 | 1<<10 | 1<<13 | 1<<15 | 1<<16 | 1<<22

func newFakeBackend(t *testing.T, nq int) *fakeBackend {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{t: t, ln: ln, path: path, features: fakeFeatures, protocol: fakeProtocol,
		nq: nq, shmSize: 64 << 10, bases: map[uint32]uint32{}, workers: map[uint32]*fakeWorker{}}
	go b.accept()
	t.Cleanup(b.shutdown)
	return b
}

func (b *fakeBackend) accept() {
	for {
		c, err := b.ln.AcceptUnix()
		if err != nil {
			return
		}
		done := make(chan struct{})
		b.mu.Lock()
		b.conn = c
		b.connDone = done
		b.status = 0 // a new connection starts from a fresh device state
		b.mu.Unlock()
		b.serve(c)
		close(done)
	}
}

// drop kills the current connection the way a crashing back-end does.
func (b *fakeBackend) drop() {
	b.mu.Lock()
	c, done := b.conn, b.connDone
	b.mu.Unlock()
	if c != nil {
		c.Close()
		<-done
	}
}

func (b *fakeBackend) shutdown() {
	b.ln.Close()
	b.drop()
}

// take returns and clears the recorded request codes.
func (b *fakeBackend) take() []uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.log
	b.log = nil
	return out
}

func (b *fakeBackend) channel() *net.UnixConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chanConn
}

func (b *fakeBackend) memRegions() []fakeRegion {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.regions)
}

var ne = binary.NativeEndian

type fakeMsg struct {
	req, flags uint32
	p          []byte
	fds        []int
}

func fakeRead(c *net.UnixConn) (fakeMsg, error) {
	var hb [12]byte
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := c.ReadMsgUnix(hb[:], oob)
	if err != nil {
		return fakeMsg{}, err
	}
	if n == 0 {
		return fakeMsg{}, io.EOF
	}
	if n < 12 {
		if _, err := io.ReadFull(c, hb[n:]); err != nil {
			return fakeMsg{}, err
		}
	}
	m := fakeMsg{req: ne.Uint32(hb[0:]), flags: ne.Uint32(hb[4:])}
	if oobn > 0 {
		cms, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range cms {
			fds, _ := unix.ParseUnixRights(&cm)
			m.fds = append(m.fds, fds...)
		}
	}
	m.p = make([]byte, ne.Uint32(hb[8:]))
	_, err = io.ReadFull(c, m.p)
	return m, err
}

func fakeWrite(c *net.UnixConn, req, flags uint32, p []byte, fds []int) error {
	b := make([]byte, 12+len(p))
	ne.PutUint32(b[0:], req)
	ne.PutUint32(b[4:], flags)
	ne.PutUint32(b[8:], uint32(len(p)))
	copy(b[12:], p)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}

func u64(v uint64) []byte { return ne.AppendUint64(nil, v) }

func (b *fakeBackend) serve(c *net.UnixConn) {
	vr := map[uint32]*vringSetup{}
	ring := func(i uint32) *vringSetup {
		if vr[i] == nil {
			vr[i] = &vringSetup{kick: -1, call: -1}
		}
		return vr[i]
	}
	var table *guestmem.Table
	defer func() {
		b.stopWorkers()
		for _, r := range vr {
			closeIf(r.kick)
			closeIf(r.call)
		}
		b.mu.Lock()
		for _, r := range b.regions {
			r.m.Unmap()
		}
		b.regions = nil
		if b.chanConn != nil {
			b.chanConn.Close()
			b.chanConn = nil
		}
		b.mu.Unlock()
		c.Close()
	}()
	for {
		m, err := fakeRead(c)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.log = append(b.log, m.req)
		b.mu.Unlock()
		if m.flags&^uint32(0x8) != 1 {
			b.t.Errorf("request %d with flags %#x", m.req, m.flags)
		}
		reply := func(p []byte) {
			b.hold.Lock()
			fakeWrite(c, m.req, 0x5, p, nil)
			b.hold.Unlock()
		}
		acked := false
		switch m.req {
		case 1:
			reply(u64(b.features))
			acked = true
		case 15:
			reply(u64(b.protocol))
			acked = true
		case 17:
			reply(u64(uint64(b.nq)))
			acked = true
		case 36:
			reply(u64(32))
			acked = true
		case 21:
			f := os.NewFile(uintptr(m.fds[0]), "chan")
			nc, _ := net.FileConn(f)
			f.Close()
			m.fds = nil
			b.mu.Lock()
			b.chanConn = nc.(*net.UnixConn)
			b.mu.Unlock()
		case 44:
			p := make([]byte, 2056)
			ne.PutUint32(p, 1)
			ne.PutUint64(p[8:], b.shmSize)
			reply(p)
			acked = true
		case 40:
			b.mu.Lock()
			s := b.status
			b.mu.Unlock()
			reply(u64(s))
			acked = true
		case 39:
			b.mu.Lock()
			b.status = ne.Uint64(m.p)
			b.mu.Unlock()
			if b.status == 0 {
				b.stopWorkers()
			}
		case 5, 37:
			var rs [][]byte
			if m.req == 5 {
				n := ne.Uint32(m.p)
				for i := range n {
					rs = append(rs, m.p[8+32*i:8+32*i+32])
				}
				b.mu.Lock()
				for _, r := range b.regions {
					r.m.Unmap()
				}
				b.regions = nil
				b.mu.Unlock()
			} else {
				rs = [][]byte{m.p[8:40]}
			}
			var tregs []guestmem.Region
			for i, rb := range rs {
				r := fakeRegion{GPA: ne.Uint64(rb[0:]), Size: ne.Uint64(rb[8:]), UVA: ne.Uint64(rb[16:]), Off: ne.Uint64(rb[24:])}
				mp, err := guestmem.MapOwn(m.fds[i], r.Off, r.Size)
				if err != nil {
					b.t.Errorf("mapping region %+v: %v", r, err)
					continue
				}
				r.m = mp
				b.mu.Lock()
				b.regions = append(b.regions, r)
				b.mu.Unlock()
			}
			for _, r := range b.memRegions() {
				tregs = append(tregs, guestmem.Region{GuestPhys: r.GPA, Size: r.Size, UserAddr: r.UVA, MmapOffset: r.Off, Mapping: r.m})
			}
			if table, err = guestmem.NewTable(tregs); err != nil {
				b.t.Errorf("memory table: %v", err)
			}
		case 8:
			ring(ne.Uint32(m.p)).num = ne.Uint32(m.p[4:])
		case 10:
			ring(ne.Uint32(m.p)).base = ne.Uint32(m.p[4:])
			b.mu.Lock()
			b.bases[ne.Uint32(m.p)] = ne.Uint32(m.p[4:])
			b.mu.Unlock()
		case 9:
			r := ring(ne.Uint32(m.p))
			r.desc, r.used, r.avail, r.haveAddr = ne.Uint64(m.p[8:]), ne.Uint64(m.p[16:]), ne.Uint64(m.p[24:]), true
		case 12, 13:
			r := ring(uint32(ne.Uint64(m.p) & 0xff))
			fd := -1
			if len(m.fds) == 1 {
				fd = m.fds[0]
				m.fds = nil
			}
			// A call fd may change while the ring runs (QEMU unmasks
			// the notifiers after the start): the worker signals
			// whichever is current, under mu.
			b.mu.Lock()
			if m.req == 12 {
				closeIf(r.kick)
				r.kick = fd
			} else {
				closeIf(r.call)
				r.call = fd
			}
			b.mu.Unlock()
		case 18:
			idx, on := ne.Uint32(m.p), ne.Uint32(m.p[4:]) == 1
			r := ring(idx)
			r.enabled = on
			if on && r.haveAddr && r.kick >= 0 && table != nil {
				b.startWorker(idx, r, table)
			}
		case 11:
			idx := ne.Uint32(m.p)
			next := b.stopWorker(idx)
			if next < 0 {
				next = int(ring(idx).base)
			}
			p := make([]byte, 8)
			ne.PutUint32(p, idx)
			ne.PutUint32(p[4:], uint32(next))
			reply(p)
			acked = true
		case 24:
			size := ne.Uint32(m.p[4:])
			p := make([]byte, 12+size)
			copy(p, m.p[:12])
			copy(p[12:], bytes.Repeat([]byte("cfg!"), int(size/4+1)))
			reply(p)
			acked = true
		}
		for _, fd := range m.fds {
			unix.Close(fd)
		}
		if m.flags&0x8 != 0 && !acked {
			reply(u64(0))
		}
	}
}

func closeIf(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// startWorker serves ring idx: every chain's readable bytes come back
// upper-cased in its writable buffers.
func (b *fakeBackend) startWorker(idx uint32, r *vringSetup, table *guestmem.Table) {
	desc, err1 := table.UserToGuest(r.desc)
	avail, err2 := table.UserToGuest(r.avail)
	used, err3 := table.UserToGuest(r.used)
	if err1 != nil || err2 != nil || err3 != nil {
		b.t.Errorf("ring %d addresses do not translate: %v %v %v", idx, err1, err2, err3)
		return
	}
	dq, err := virtio.NewDeviceQueue(table, uint16(r.num), virtio.RingAddrs{Desc: desc, Avail: avail, Used: used}, true)
	if err != nil {
		b.t.Errorf("ring %d: %v", idx, err)
		return
	}
	dq.SetNextAvail(uint16(r.base))
	w := &fakeWorker{done: make(chan struct{}), dq: dq}
	b.mu.Lock()
	b.workers[idx] = w
	b.mu.Unlock()
	kick := r.kick
	go func() {
		defer close(w.done)
		for !w.stop.Load() {
			pfd := []unix.PollFd{{Fd: int32(kick), Events: unix.POLLIN}}
			if n, _ := unix.Poll(pfd, 10); n > 0 {
				var buf [8]byte
				unix.Read(kick, buf[:])
			}
			for {
				c, ok, err := dq.Pop()
				if err != nil {
					b.t.Errorf("ring %d: %v", idx, err)
					return
				}
				if !ok {
					break
				}
				in := make([]byte, c.ReadableLen)
				c.ReadAll(in)
				n := c.WriteAll(bytes.ToUpper(in))
				dq.Push(c.Head, n)
			}
			if dq.NeedsNotify() {
				b.mu.Lock()
				if r.call >= 0 {
					unix.Write(r.call, u64(1))
				}
				b.mu.Unlock()
			}
		}
	}()
}

// stopWorker stops ring idx and returns its next avail index (-1 if it
// had no worker).
func (b *fakeBackend) stopWorker(idx uint32) int {
	b.mu.Lock()
	w := b.workers[idx]
	delete(b.workers, idx)
	b.mu.Unlock()
	if w == nil {
		return -1
	}
	w.stop.Store(true)
	<-w.done
	return int(w.dq.NextAvail())
}

func (b *fakeBackend) stopWorkers() {
	b.mu.Lock()
	var idx []uint32
	for i := range b.workers {
		idx = append(idx, i)
	}
	b.mu.Unlock()
	for _, i := range idx {
		b.stopWorker(i)
	}
}

func (b *fakeBackend) base(i uint32) uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bases[i]
}
