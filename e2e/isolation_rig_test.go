package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The isolation suite's host: one vstellard process (the binary an
// operator runs), and on it four simulated VMs attached through real
// vhost-user sockets and opened by the guest driver:
//
//   - A, the attacker, with 3 GiB of RAM so that its guest physical map
//     has q35's hole between 2 GiB and 4 GiB;
//   - V, the victim, which exposes a few MRs to A and runs traffic with B;
//   - B, V's legitimate peer;
//   - F, a VM whose VMM lacks SHMEM, so its doorbells live in an area of
//     its own RAM (the fallback), tagged as IO memory.
//
// V's exposed memory is one arena filled with a known pattern; the suite
// checks after every attack that the arena holds exactly what it should.

// Layout of V's arena. B's traffic writes and sends into [0, trafficUsed);
// the rest of the traffic MR, [trafficUsed, trafficLen), is exposed but
// never legitimately written, so it must keep its pattern like everything
// else.
const (
	arenaSize   = 256 << 10
	trafficLen  = 64 << 10
	trafficUsed = 48 << 10
	exposedOff  = 128 << 10 // vExposed: every access, V's main PD
	otherPDOff  = 136 << 10 // vOther: remote access, V's second PD
	staleOff    = 144 << 10 // registered and deregistered by a subtest
	reusedOff   = 152 << 10 // registered into the stale MR's slot
	legitOff    = 192 << 10 // where A's one legitimate WRITE lands
	mrLen       = 4 << 10

	// evil is what A's buffers hold: a byte of it in V's memory would
	// be A's data where it must not be.
	evil = 0xee

	opTimeout = 10 * time.Second
)

type isoRig struct {
	ctx        context.Context
	proc       *daemonProc
	host       *hostsim.Host
	a, v, b, f *hostsim.VM

	// A's standing objects: two PDs and a buffer of evil bytes
	// registered in each.
	aPD, aPD2 *guestdriver.PD
	aBuf      guestdriver.Buffer // 64 KiB in aPD, every access
	aBuf2     guestdriver.Buffer // 4 KiB in aPD2
	aMR, aMR2 *guestdriver.MR

	// V's exposed memory.
	vPD, vPD2 *guestdriver.PD
	arena     guestdriver.Buffer
	want      []byte          // what the arena must hold outside [0, trafficUsed)
	vExposed  *guestdriver.MR // at exposedOff, every access, vPD
	vOther    *guestdriver.MR // at otherPDOff, every access, vPD2
	vLegit    *guestdriver.MR // at legitOff, every access, vPD
	staleKey  uint32          // the key of a deregistered MR of V

	tr *traffic
}

func newIsoRig(t *testing.T) *isoRig {
	t.Helper()
	p := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	host, err := hostsim.New(ctx, hostsim.Options{API: filepath.Join(p.runDir, "vstellard.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(); err != nil {
			t.Errorf("closing the host: %v", err)
		}
	})
	r := &isoRig{ctx: ctx, proc: p, host: host}
	noShmem := func(c *vmsim.Config) {
		c.ProtocolFeatures = frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoShmem)
	}
	for _, vm := range []struct {
		to   **hostsim.VM
		name string
		o    hostsim.VMOptions
	}{
		{&r.a, "iso-a", hostsim.VMOptions{MemSize: 3 << 30}},
		{&r.b, "iso-b", hostsim.VMOptions{MemSize: 256 << 20}},
		{&r.f, "iso-f", hostsim.VMOptions{MemSize: 64 << 20, Configure: noShmem}},
	} {
		if *vm.to, err = host.AddVM(ctx, vm.name, vm.o); err != nil {
			t.Fatal(err)
		}
		d := (*vm.to).Driver
		t.Cleanup(func() { d.Close() }) // runs before host.Close
	}
	// V's device has a small max_mr, so that the stale-key subtest can
	// walk the key table round to a freed slot (the device hands out
	// never-used slots first). hostsim creates devices with default
	// limits, so V's is created here.
	r.v = r.addVM(t, "iso-v", 256<<20, `{"max_mr": 64}`)
	if r.f.Driver.Config().Status&abi.ConfigStatusDoorbellGuestRAM == 0 {
		t.Fatalf("VM F without SHMEM: config status %#x, want the guest-RAM doorbell fallback", r.f.Driver.Config().Status)
	}
	for _, vm := range []*hostsim.VM{r.a, r.v, r.b} {
		if vm.Driver.Config().Status&abi.ConfigStatusDoorbellShmem == 0 {
			t.Fatalf("%s: config status %#x, want doorbells in shared memory", vm.Name, vm.Driver.Config().Status)
		}
	}

	// A: two PDs, evil bytes in each.
	r.aPD, r.aPD2 = r.allocPD(t, r.a), r.allocPD(t, r.a)
	r.aBuf, r.aBuf2 = r.alloc(t, r.a, 64<<10), r.alloc(t, r.a, 4<<10)
	fillByte(r.aBuf.Bytes(), evil)
	fillByte(r.aBuf2.Bytes(), evil)
	r.aMR = r.regMR(t, r.aPD, r.aBuf, abi.AccessAll)
	r.aMR2 = r.regMR(t, r.aPD2, r.aBuf2, abi.AccessLocalWrite)

	// V: the arena, with a pattern, and the MRs A may aim at.
	r.vPD, r.vPD2 = r.allocPD(t, r.v), r.allocPD(t, r.v)
	r.arena = r.alloc(t, r.v, arenaSize)
	for i := range r.arena.Bytes() {
		r.arena.Bytes()[i] = canary(i)
	}
	r.want = append([]byte(nil), r.arena.Bytes()...)
	r.vExposed = r.regMR(t, r.vPD, r.slice(t, r.arena, exposedOff, mrLen), abi.AccessAll)
	r.vOther = r.regMR(t, r.vPD2, r.slice(t, r.arena, otherPDOff, mrLen), abi.AccessAll)
	r.vLegit = r.regMR(t, r.vPD, r.slice(t, r.arena, legitOff, mrLen), abi.AccessAll)
	return r
}

// addVM creates device name with the given limits (JSON) on the daemon
// and boots a VM with memSize bytes of RAM against it.
func (r *isoRig) addVM(t *testing.T, name string, memSize uint64, limits string) *hostsim.VM {
	t.Helper()
	info, err := r.host.Client().CreateDevice(r.ctx, api.DeviceSpec{Name: name, Limits: json.RawMessage(limits)})
	if err != nil {
		t.Fatalf("creating device %s: %v", name, err)
	}
	vm, drv := bootVM(t, info.Socket, memSize)
	t.Cleanup(func() { drv.Close() })
	return &hostsim.VM{Name: name, Socket: info.Socket, VM: vm, Driver: drv}
}

// canary is the arena's pattern: never the evil byte in a run, and
// different at every offset of a 4-KiB window.
func canary(i int) byte { return byte(i*131+i>>8) ^ 0x5c }

func fillByte(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func (r *isoRig) allocPD(t *testing.T, vm *hostsim.VM) *guestdriver.PD {
	t.Helper()
	pd, err := vm.Driver.AllocPD(r.ctx)
	if err != nil {
		t.Fatalf("%s: ALLOC_PD: %v", vm.Name, err)
	}
	return pd
}

func (r *isoRig) alloc(t *testing.T, vm *hostsim.VM, n uint64) guestdriver.Buffer {
	t.Helper()
	b, err := vm.Driver.Alloc(n, 4096)
	if err != nil {
		t.Fatalf("%s: %v", vm.Name, err)
	}
	return b
}

func (r *isoRig) slice(t *testing.T, b guestdriver.Buffer, off, n uint64) guestdriver.Buffer {
	t.Helper()
	s, err := b.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *isoRig) regMR(t *testing.T, pd *guestdriver.PD, b guestdriver.Buffer, access abi.Access) *guestdriver.MR {
	t.Helper()
	mr, err := pd.RegMR(r.ctx, b, access)
	if err != nil {
		t.Fatalf("REG_MR of %d bytes at %#x: %v", b.Len(), b.GPA, err)
	}
	return mr
}

// command sends one control command on vm's control queue as a driver
// would, bypassing the guest driver's own checks (which refuse, for
// example, to name a destroyed QP again). req is a payload struct, raw
// []byte, or nil; resp a payload struct to decode into, or nil. A non-OK
// status is an error wrapping the abi.Status.
func command(ctx context.Context, vm *hostsim.VM, op abi.Opcode, req, resp any) error {
	var payload []byte
	switch p := req.(type) {
	case nil:
	case []byte:
		payload = p
	default:
		payload = abi.EncodePayload(nil, req)
	}
	// The device refuses to execute a command whose response would not
	// fit, so the buffer always has the response's full size.
	size, _ := op.ResponseSize()
	if resp != nil {
		size = binary.Size(resp)
	}
	out, err := vmsim.NewTransport(vm.VM).Command(ctx, abi.AppendRequest(nil, op, payload), uint32(abi.ResponseHeaderSize+size))
	if err != nil {
		return err
	}
	st, body, err := abi.DecodeResponse(out)
	if err != nil {
		return fmt.Errorf("%v: %w", op, err)
	}
	if err := abi.CheckStatus(op, st); err != nil {
		return err
	}
	if resp != nil {
		if _, err := binary.Decode(body, binary.LittleEndian, resp); err != nil {
			return fmt.Errorf("%v response: %w", op, err)
		}
	}
	return nil
}

// wantStatus fails unless err carries exactly status want.
func wantStatus(t *testing.T, what string, err error, want abi.Status) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want status %v", what, err, want)
	}
}

// fastConn connects qp to peer with one transport retry after a ~1 ms
// timeout and one RNR retry, so an unanswered request fails in a few ms.
func fastConn(qp *guestdriver.QP, peer guestdriver.Endpoint) guestdriver.RCConnect {
	c := qp.DefaultRCConnect(peer)
	c.Timeout, c.RetryCnt, c.RNRRetry, c.MinRNRTimer = 1, 1, 1, 1
	return c
}

// qpOn creates a CQ and an RC QP using it on vm's pd; both are destroyed
// when the (sub)test ends.
func (r *isoRig) qpOn(t *testing.T, vm *hostsim.VM, pd *guestdriver.PD) (*guestdriver.QP, *guestdriver.CQ) {
	t.Helper()
	cq, err := vm.Driver.CreateCQ(r.ctx, 16)
	if err != nil {
		t.Fatalf("%s: CREATE_CQ: %v", vm.Name, err)
	}
	qp, err := pd.CreateQP(r.ctx, guestdriver.QPInit{SendCQ: cq, RecvCQ: cq,
		Cap: guestdriver.QPCap{SQSize: 16, RQSize: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	if err != nil {
		t.Fatalf("%s: CREATE_QP: %v", vm.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := qp.Destroy(ctx); err != nil && !errors.Is(err, guestdriver.ErrDestroyed) {
			t.Errorf("%s: DESTROY_QP %d: %v", vm.Name, qp.Num(), err)
		}
		if err := cq.Destroy(ctx); err != nil && !errors.Is(err, guestdriver.ErrDestroyed) {
			t.Errorf("%s: DESTROY_CQ %d: %v", vm.Name, cq.Num(), err)
		}
	})
	return qp, cq
}

// conn is one end of an RC connection made for an attack.
type conn struct {
	vm *hostsim.VM
	qp *guestdriver.QP
	cq *guestdriver.CQ
}

// pair makes a fresh QP on each of x (in xpd) and y (in ypd) and connects
// them to each other with fastConn.
func (r *isoRig) pair(t *testing.T, x *hostsim.VM, xpd *guestdriver.PD, y *hostsim.VM, ypd *guestdriver.PD) (conn, conn) {
	t.Helper()
	xq, xcq := r.qpOn(t, x, xpd)
	yq, ycq := r.qpOn(t, y, ypd)
	if err := xq.Connect(r.ctx, fastConn(xq, yq.Endpoint())); err != nil {
		t.Fatalf("%s: %v", x.Name, err)
	}
	if err := yq.Connect(r.ctx, fastConn(yq, xq.Endpoint())); err != nil {
		t.Fatalf("%s: %v", y.Name, err)
	}
	return conn{x, xq, xcq}, conn{y, yq, ycq}
}

// attackV connects a fresh QP of A (in pd) to a fresh QP of V in V's
// main PD, the PD of vExposed.
func (r *isoRig) attackV(t *testing.T, pd *guestdriver.PD) (a, v conn) {
	t.Helper()
	return r.pair(t, r.a, pd, r.v, r.vPD)
}

// post posts wr on c's QP and returns its one completion.
func post(t *testing.T, c conn, wr guestdriver.SendWR) guestdriver.WC {
	t.Helper()
	if err := c.qp.PostSend(wr); err != nil {
		t.Fatalf("%s: posting %v: %v", c.vm.Name, wr.Opcode, err)
	}
	wcs, err := pollWCs(c.cq, 1, opTimeout)
	if err != nil {
		t.Fatalf("%s: %v", c.vm.Name, err)
	}
	return wcs[0]
}

// checkWC fails unless wc is the completion of WR wrid with status st.
func checkWC(t *testing.T, what string, wc guestdriver.WC, wrid uint64, op abi.WROpcode, st abi.WCStatus) {
	t.Helper()
	if wc.WRID != wrid || wc.Status != st || wc.Opcode != abi.WCOpcodeFor(op) {
		t.Fatalf("%s: completion {wr %d %v %v}, want {wr %d %v %v}", what, wc.WRID, wc.Opcode, wc.Status, wrid, abi.WCOpcodeFor(op), st)
	}
}

// pollWCs polls cq until it has returned n completions.
func pollWCs(cq *guestdriver.CQ, n int, timeout time.Duration) ([]guestdriver.WC, error) {
	got := make([]guestdriver.WC, 0, n)
	wcs := make([]guestdriver.WC, n)
	deadline := time.Now().Add(timeout)
	for len(got) < n {
		k := cq.Poll(wcs[:n-len(got)])
		got = append(got, wcs[:k]...)
		if k > 0 {
			continue
		}
		if err := cq.Err(); err != nil {
			return got, fmt.Errorf("CQ %d: %w", cq.Num(), err)
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("CQ %d: %d of %d completions after %v", cq.Num(), len(got), n, timeout)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return got, nil
}

// expectEvent reads d's asynchronous events until one of type typ for
// handle arrives, and checks its info. Events for other objects are A's
// leftovers from earlier attacks and are skipped.
func expectEvent(t *testing.T, vm *hostsim.VM, typ abi.EventType, handle uint32, info abi.WCStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var skipped []abi.Event
	for {
		ev, err := vm.Driver.WaitEvent(ctx)
		if err != nil {
			t.Fatalf("%s: no %v event for %d: %v (skipped %+v)", vm.Name, typ, handle, err, skipped)
		}
		if ev.Type == typ && ev.Handle == handle {
			if ev.Info != uint32(info) {
				t.Fatalf("%s: %v event for %d with info %d, want %v (%d)", vm.Name, typ, handle, ev.Info, info, uint32(info))
			}
			return
		}
		skipped = append(skipped, ev)
	}
}

// noEvents fails if vm's driver has an asynchronous event waiting.
func noEvents(t *testing.T, vm *hostsim.VM) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := vm.Driver.WaitEvent(ctx); err == nil {
		t.Fatalf("%s received an event: %+v", vm.Name, ev)
	}
}

// qpState is the state QUERY_QP reports.
func (r *isoRig) qpState(t *testing.T, c conn) abi.QPState {
	t.Helper()
	st, err := c.qp.State(r.ctx)
	if err != nil {
		t.Fatalf("%s: QUERY_QP %d: %v", c.vm.Name, c.qp.Num(), err)
	}
	return st
}

// checkArena fails if V's arena outside the traffic window differs from
// what it must hold, naming the first bad byte.
func (r *isoRig) checkArena(t *testing.T) {
	t.Helper()
	got := r.arena.Bytes()[trafficUsed:]
	want := r.want[trafficUsed:]
	if i := firstDiff(got, want); i >= 0 {
		// Reported once: later subtests compare against what is there now.
		defer copy(want, got)
		off := trafficUsed + i
		t.Fatalf("V's memory changed at arena offset %#x (GPA %#x): %#02x, want %#02x (evil byte: %v)",
			off, r.arena.GPA+uint64(off), got[i], want[i], got[i] == evil)
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// bystandersOK is every subtest's epilogue: V's and B's traffic went on
// after the attack without an error or a wrong byte, V's memory holds
// what it should, and neither V nor B heard of anything.
func (r *isoRig) bystandersOK(t *testing.T) {
	t.Helper()
	r.tr.waitRounds(t, 2)
	r.checkArena(t)
	noEvents(t, r.v)
	noEvents(t, r.b)
}

// mappingOf finds the mapping of this process that holds b's first byte
// in /proc/self/maps and returns its inode and path.
func mappingOf(t *testing.T, b []byte) (inode uint64, path string) {
	t.Helper()
	addr, err := strconv.ParseUint(strings.TrimPrefix(fmt.Sprintf("%p", &b[0]), "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || addr < l || addr >= h {
			continue
		}
		ino, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil {
			t.Fatalf("maps line %q: %v", line, err)
		}
		return ino, strings.Join(f[5:], " ")
	}
	t.Fatalf("address %#x is in no mapping of /proc/self/maps", addr)
	return 0, ""
}
