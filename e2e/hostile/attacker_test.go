package hostile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The attacker: a vhost-user front-end written from the protocol text
// (QEMU docs/interop/vhost-user.rst), sharing no code with package vhost,
// so that a misreading of the protocol there is not repeated here.

var le = binary.LittleEndian

// Front-end request codes used by the cases ("Front-end message types").
const (
	reqGetFeatures         = 1
	reqSetFeatures         = 2
	reqSetOwner            = 3
	reqResetOwner          = 4
	reqSetMemTable         = 5
	reqSetLogBase          = 6
	reqSetVringNum         = 8
	reqSetVringAddr        = 9
	reqSetVringBase        = 10
	reqGetVringBase        = 11
	reqSetVringKick        = 12
	reqSetVringCall        = 13
	reqSetVringErr         = 14
	reqGetProtocolFeatures = 15
	reqSetProtocolFeatures = 16
	reqGetQueueNum         = 17
	reqSetVringEnable      = 18
	reqSetBackendReqFD     = 21
	reqGetConfig           = 24
	reqSetConfig           = 25
	reqResetDevice         = 34
	reqGetMaxMemSlots      = 36
	reqAddMemReg           = 37
	reqRemMemReg           = 38
	reqSetStatus           = 39
	reqGetStatus           = 40
	reqGetShmemConfig      = 44
)

// Header flags: version 1 in bits 0-1, REPLY (bit 2), NEED_REPLY (bit 3).
const (
	flagV1        = 0x1
	flagReply     = 0x4
	flagNeedReply = 0x8
	headerLen     = 12
)

// Protocol feature bits the attacker negotiates.
const (
	protoMQ           = 1 << 0
	protoReplyAck     = 1 << 3
	protoConfig       = 1 << 9
	protoResetDevice  = 1 << 13
	protoMemSlots     = 1 << 15
	protoStatus       = 1 << 16
	featEventIdx      = 1 << 29
	featProtocolFeats = 1 << 30
	featVersion1      = 1 << 32
	vringNoFD         = 0x100
	userAddrBase      = 0x7f00_0000_0000 // any front-end address will do
)

// frontEnd is one attacker connection.
type frontEnd struct {
	t *testing.T
	c *net.UnixConn
}

func dialFrontEnd(t *testing.T, path string) *frontEnd {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	f := &frontEnd{t: t, c: c}
	t.Cleanup(f.close)
	return f
}

func (f *frontEnd) close() { f.c.Close() }

// header encodes the 12-byte message header.
func header(req, flags, size uint32) []byte {
	b := le.AppendUint32(nil, req)
	b = le.AppendUint32(b, flags)
	return le.AppendUint32(b, size)
}

// sendRaw writes b in one sendmsg, with fds attached as SCM_RIGHTS.
func (f *frontEnd) sendRaw(b []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	f.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _, err := f.c.WriteMsgUnix(b, oob, nil)
	return err
}

// send writes a message whose header says what the payload holds.
func (f *frontEnd) send(req, flags uint32, payload []byte, fds ...int) error {
	return f.sendRaw(append(header(req, flags, uint32(len(payload))), payload...), fds...)
}

// recv reads one reply: header and payload.
func (f *frontEnd) recv() (req, flags uint32, payload []byte, err error) {
	f.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [headerLen]byte
	if _, err := readFull(f.c, h[:]); err != nil {
		return 0, 0, nil, err
	}
	req, flags = le.Uint32(h[:]), le.Uint32(h[4:])
	size := le.Uint32(h[8:])
	if size > 4096 {
		return req, flags, nil, fmt.Errorf("reply of %d bytes", size)
	}
	payload = make([]byte, size)
	_, err = readFull(f.c, payload)
	return req, flags, payload, err
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

var errNack = errors.New("back-end answered a non-zero REPLY_ACK")

// get sends a request that has a reply body and returns the body.
func (f *frontEnd) get(req uint32, payload []byte) ([]byte, error) {
	if err := f.send(req, flagV1, payload); err != nil {
		return nil, err
	}
	r, flags, body, err := f.recv()
	if err != nil {
		return nil, fmt.Errorf("reply to %d: %w", req, err)
	}
	if r != req || flags&flagReply == 0 {
		return nil, fmt.Errorf("reply to %d: request %d flags %#x", req, r, flags)
	}
	return body, nil
}

// ask sends a request with NEED_REPLY and waits for its REPLY_ACK.
func (f *frontEnd) ask(req uint32, payload []byte, fds ...int) error {
	if err := f.send(req, flagV1|flagNeedReply, payload, fds...); err != nil {
		return err
	}
	return f.ack(req)
}

func (f *frontEnd) ack(req uint32) error {
	r, flags, body, err := f.recv()
	switch {
	case err != nil:
		return fmt.Errorf("ack of %d: %w", req, err)
	case r != req || flags&flagReply == 0 || len(body) != 8:
		return fmt.Errorf("ack of %d: request %d flags %#x %d bytes", req, r, flags, len(body))
	case le.Uint64(body) != 0:
		return fmt.Errorf("request %d: %w (%d)", req, errNack, le.Uint64(body))
	}
	return nil
}

// mustAsk is ask for requests a well-behaved set-up needs.
func (f *frontEnd) mustAsk(req uint32, payload []byte, fds ...int) {
	f.t.Helper()
	if err := f.ask(req, payload, fds...); err != nil {
		f.t.Fatal(err)
	}
}

// hungUp reports whether the back-end closed the connection within d:
// any reply bytes that arrive meanwhile are discarded.
func (f *frontEnd) hungUp(d time.Duration) bool {
	f.c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 4096)
	for {
		if _, err := f.c.Read(b); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// alive reports whether the connection still answers: GET_FEATURES
// needs no owner and always has a reply.
func (f *frontEnd) alive() bool {
	_, err := f.get(reqGetFeatures, nil)
	return err == nil
}

func u64(v uint64) []byte { return le.AppendUint64(nil, v) }

func vringState(idx, num uint32) []byte { return le.AppendUint32(le.AppendUint32(nil, idx), num) }

// vringAddr is SET_VRING_ADDR's payload: index, flags, then the
// descriptor, used and available ring addresses and the log address.
func vringAddr(idx uint32, desc, used, avail uint64) []byte {
	b := le.AppendUint32(le.AppendUint32(nil, idx), 0)
	for _, v := range []uint64{desc, used, avail, 0} {
		b = le.AppendUint64(b, v)
	}
	return b
}

// region is one VhostUserMemoryRegion.
type region struct{ gpa, size, uaddr, offset uint64 }

func (r region) encode(b []byte) []byte {
	for _, v := range []uint64{r.gpa, r.size, r.uaddr, r.offset} {
		b = le.AppendUint64(b, v)
	}
	return b
}

// memTable is SET_MEM_TABLE's payload.
func memTable(rs ...region) []byte {
	b := le.AppendUint32(le.AppendUint32(nil, uint32(len(rs))), 0)
	for _, r := range rs {
		b = r.encode(b)
	}
	return b
}

// memReg is ADD_MEM_REG's and REM_MEM_REG's payload: u64 padding, one region.
func memReg(r region) []byte { return r.encode(make([]byte, 8)) }

// guestRAM is a memfd the attacker maps and hands over as guest memory.
type guestRAM struct {
	fd   int
	mem  []byte // nil once the attacker shrank the file under it
	size uint64
}

func newGuestRAM(t *testing.T, size uint64) *guestRAM {
	t.Helper()
	fd, err := unix.MemfdCreate("hostile-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	g := &guestRAM{fd: fd, mem: mem, size: size}
	t.Cleanup(func() {
		if g.mem != nil {
			unix.Munmap(g.mem)
		}
		unix.Close(fd)
	})
	return g
}

// region is all of the RAM at guest physical address 0.
func (g *guestRAM) region() region {
	return region{gpa: 0, size: g.size, uaddr: userAddrBase, offset: 0}
}

// shrink truncates the memfd under everyone's mappings. The attacker's
// own mapping is dropped first: touching it past the end would fault here.
func (g *guestRAM) shrink(t *testing.T, size uint64) {
	t.Helper()
	if g.mem != nil {
		unix.Munmap(g.mem)
		g.mem = nil
	}
	if err := unix.Ftruncate(g.fd, int64(size)); err != nil {
		t.Fatal(err)
	}
}

func newEventFD(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatalf("eventfd: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func kick(fd int) { unix.Write(fd, u64(1)) }

// devNull and pipe give descriptors that are not what a request wants.
func devNull(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

func pipeFD(t *testing.T) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0]
}
