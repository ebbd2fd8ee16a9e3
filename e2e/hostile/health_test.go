package hostile

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Health: after every case the daemon lives, the bystander answers a
// control command and moves data, and the daemon's descriptors and RSS are
// back near what they were before the group's first case.

// rssSlack is what RSS may grow over a group: the Go heap keeps some of
// what an attack made it allocate.
const rssSlack = 16 << 20

// fdSlack is how many descriptors more than the baseline count as back:
// none, once the daemon has had its few seconds to close them.
const fdSlack = 0

// env is one group's daemon, its well-behaved bystander and the baseline.
type env struct {
	d      *daemonProc
	by     *guestdriver.Device
	loop   *loopback
	fds    int
	rss    uint64
	byGUID uint64
}

// hostileCase is one attack. run leaves the victim's socket free (every
// attacker connection closed) when it returns.
type hostileCase struct {
	name string
	run  func(t *testing.T, e *env)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{d: startDaemon(t)}
	_, e.by = bootVM(t, e.d.socket(bystander), 64<<20)
	e.loop = newLoopback(t, e.by)
	e.byGUID = e.by.Config().NodeGUID
	// One well-behaved visit to the victim first, so the baseline includes
	// what any served connection leaves allocated.
	e.victimServes(t)
	// The daemon closes that VM's descriptors after it left: wait until
	// the count has held still for 300 ms.
	var err error
	if e.fds, err = e.d.fdCount(); err != nil {
		t.Fatal(err)
	}
	for still, deadline := time.Now(), time.Now().Add(5*time.Second); time.Since(still) < 300*time.Millisecond && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n, err := e.d.fdCount(); err == nil && n != e.fds {
			e.fds, still = n, time.Now()
		}
	}
	if e.rss, err = e.d.rss(); err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline: %d fds, RSS %d KiB", e.fds, e.rss>>10)
	return e
}

// runCases runs each case as a subtest followed by the health checks, and
// ends with a well-behaved VM on the victim's device.
func runCases(t *testing.T, cases []hostileCase) {
	e := newEnv(t)
	for _, c := range cases {
		if err := e.d.exitErr(); err != nil {
			// A case killed the daemon (and failed for it): the rest of
			// the group runs against a new one.
			t.Logf("vstellard exited (%v); starting another for the cases after it", err)
			e = newEnv(t)
		}
		t.Run(c.name, func(t *testing.T) {
			// The attack in a subtest of its own, so its cleanups (closing
			// the attacker's connection) run before the checks.
			t.Run("attack", func(t *testing.T) { c.run(t, e) })
			e.checkHealth(t)
		})
	}
	t.Run("victim serves a well-behaved VM", func(t *testing.T) {
		if err := e.d.exitErr(); err != nil {
			t.Fatalf("vstellard is gone: %v", err)
		}
		e.victimServes(t)
		e.checkHealth(t)
		fds, _ := e.d.fdCount()
		rss, _ := e.d.rss()
		t.Logf("after the group: %d fds (baseline %d), RSS %d KiB (baseline %d KiB)", fds, e.fds, rss>>10, e.rss>>10)
	})
}

func (e *env) checkHealth(t *testing.T) {
	t.Helper()
	if err := e.d.exitErr(); err != nil {
		t.Fatalf("health: vstellard exited: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pa, err := e.by.QueryPort(ctx, guestdriver.Port)
	if err != nil {
		t.Fatalf("health: bystander QUERY_PORT: %v", err)
	}
	if pa.State != abi.PortActive {
		t.Errorf("health: bystander port state %v", pa.State)
	}
	if err := e.loop.write(ctx); err != nil {
		t.Errorf("health: bystander RDMA WRITE: %v", err)
	}
	// The daemon closes an attacker's descriptors once it has torn the
	// connection down, which may take a moment.
	var fds int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fds, err = e.d.fdCount(); err != nil {
			t.Fatalf("health: %v", err)
		}
		if fds <= e.fds+fdSlack || time.Now().After(deadline) {
			break
		}
	}
	if fds > e.fds+fdSlack {
		t.Errorf("health: the daemon holds %d descriptors, %d before the attacks", fds, e.fds)
	}
	rss, err := e.d.rss()
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	if rss > e.rss+rssSlack {
		t.Errorf("health: RSS %d KiB, %d KiB before the attacks", rss>>10, e.rss>>10)
	}
}

// victimServes boots a well-behaved VM on the victim's device, queries
// it and shuts it down again.
func (e *env) victimServes(t *testing.T) {
	t.Helper()
	var vm *vmsim.VM
	var drv *guestdriver.Device
	// The device may still be tearing the attacker's connection down and
	// refuse a new one meanwhile.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		vm, drv, err = tryBootVM(e.d.socket(victim), 16<<20)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("victim device does not serve a well-behaved VM: %v", err)
		}
	}
	defer vm.Close()
	defer drv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := drv.QueryDevice(ctx)
	if err != nil {
		t.Fatalf("victim QUERY_DEVICE: %v", err)
	}
	if a.VendorPartID != abi.PCIDeviceID || a.MaxQP != victimLimits["max_qp"] {
		t.Fatalf("victim QUERY_DEVICE: %+v", a)
	}
	if a.NodeGUID == e.byGUID {
		t.Fatalf("victim and bystander share node GUID %#x", a.NodeGUID)
	}
}

func tryBootVM(socket string, mem uint64) (*vmsim.VM, *guestdriver.Device, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := vmsim.New(ctx, vmsim.DeviceConfig(socket, mem))
	if err != nil {
		return nil, nil, err
	}
	if err := vm.Start(ctx); err != nil {
		vm.Close()
		return nil, nil, err
	}
	drv, err := guestdriver.Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		vm.Close()
		return nil, nil, err
	}
	return vm, drv, nil
}

func bootVM(t *testing.T, socket string, mem uint64) (*vmsim.VM, *guestdriver.Device) {
	t.Helper()
	vm, drv, err := tryBootVM(socket, mem)
	if err != nil {
		t.Fatalf("booting a VM on %s: %v", socket, err)
	}
	t.Cleanup(func() { drv.Close(); vm.Close() })
	return vm, drv
}

// loopback is a pair of connected RC QPs on the bystander: the data-path
// health check writes a counter from one into the other's MR.
type loopback struct {
	pd     *guestdriver.PD
	cq     *guestdriver.CQ
	a, b   *guestdriver.QP
	src    *guestdriver.MR
	dst    *guestdriver.MR
	seq    uint64
	wcs    []guestdriver.WC
	handle struct{ pdn, cqn, qpn, lkey uint32 }
}

func newLoopback(t *testing.T, dev *guestdriver.Device) *loopback {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := &loopback{wcs: make([]guestdriver.WC, 4)}
	check := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatalf("bystander set-up: %v", err)
		}
	}
	var err error
	l.pd, err = dev.AllocPD(ctx)
	check(err)
	l.cq, err = dev.CreateCQ(ctx, 16)
	check(err)
	init := guestdriver.QPInit{SendCQ: l.cq, RecvCQ: l.cq,
		Cap: guestdriver.QPCap{SQSize: 16, RQSize: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	l.a, err = l.pd.CreateQP(ctx, init)
	check(err)
	l.b, err = l.pd.CreateQP(ctx, init)
	check(err)
	for _, mr := range []**guestdriver.MR{&l.src, &l.dst} {
		buf, err := dev.Alloc(4096, 4096)
		check(err)
		*mr, err = l.pd.RegMR(ctx, buf, abi.AccessLocalWrite|abi.AccessRemoteWrite)
		check(err)
	}
	check(l.a.ConnectTo(ctx, l.b.Endpoint()))
	check(l.b.ConnectTo(ctx, l.a.Endpoint()))
	l.handle.pdn, l.handle.cqn, l.handle.qpn, l.handle.lkey = l.pd.Num(), l.cq.Num(), l.a.Num(), l.dst.LKey()
	check(l.write(ctx))
	return l
}

// write RDMA-writes the next counter value and waits until it landed.
func (l *loopback) write(ctx context.Context) error {
	l.seq++
	binary.LittleEndian.PutUint64(l.src.Buffer().Bytes(), l.seq)
	err := l.a.PostSend(guestdriver.SendWR{
		WRID: l.seq, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{l.src.SGE(0, 8)},
		RemoteAddr: l.dst.IOVA(), RKey: l.dst.RKey(), Signaled: true,
	})
	if err != nil {
		return err
	}
	for {
		if n := l.cq.Poll(l.wcs); n > 0 {
			if l.wcs[0].Status != abi.WCSuccess {
				return fmt.Errorf("completion status %v", l.wcs[0].Status)
			}
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	if got := binary.LittleEndian.Uint64(l.dst.Buffer().Bytes()); got != l.seq {
		return fmt.Errorf("RDMA WRITE landed %d, want %d", got, l.seq)
	}
	return nil
}
