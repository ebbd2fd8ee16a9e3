package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/testkit/verbstest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// needNamespaces skips outside CI when network namespaces cannot be made;
// under CI=true it fails instead.
func needNamespaces(t *testing.T) {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs network namespaces: %v", err)
		}
		t.Skipf("no network namespaces (run as root): %v", err)
	}
}

// xend is one guest's verbs objects for the cross-host tests.
type xend struct {
	vm  *hostsim.VM
	pd  *guestdriver.PD
	cq  *guestdriver.CQ
	qp  *guestdriver.QP
	buf guestdriver.Buffer
	mr  *guestdriver.MR
}

const xbuf = 4 << 20

func newXend(t *testing.T, ctx context.Context, vm *hostsim.VM) *xend {
	t.Helper()
	v, err := verbstest.New(ctx, vm.Driver, verbstest.Options{CQSize: 256, BufSize: xbuf,
		Cap: guestdriver.QPCap{SQSize: 64, RQSize: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	if err != nil {
		t.Fatalf("%s: %v", vm.Name, err)
	}
	return &xend{vm: vm, pd: v.PD, cq: v.SCQ, qp: v.QP, buf: v.Buf, mr: v.MR}
}

func (e *xend) connect(t *testing.T, ctx context.Context, peer *xend, c guestdriver.RCConnect) {
	t.Helper()
	if err := e.qp.Connect(ctx, c); err != nil {
		t.Fatalf("%s: connect: %v", e.vm.Name, err)
	}
}

// post posts wr and returns its completion.
func (e *xend) post(t *testing.T, wr guestdriver.SendWR) guestdriver.WC {
	t.Helper()
	if err := e.qp.PostSend(wr); err != nil {
		t.Fatalf("%s: posting %v: %v", e.vm.Name, wr.Opcode, err)
	}
	wcs, err := pollWCs(e.cq, 1, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v %v", e.vm.Name, wr.Opcode, err)
	}
	return wcs[0]
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>9)
	}
}

// TestCrossHostVerbs: two VMs on two hosts (two network namespaces, each
// with its own in-process vstellard and cross-host fabric) connect RC
// QPs and run every verb across the wire; every byte lands, every
// completion is right, and both fabrics made one connection.
func TestCrossHostVerbs(t *testing.T) {
	needNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := hostsim.NewPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsxh", MTU: 9000}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	va, err := p.Hosts[0].AddVM(ctx, "xa", hostsim.VMOptions{MemSize: 256 << 20, Tenant: 5})
	if err != nil {
		t.Fatal(err)
	}
	vb, err := p.Hosts[1].AddVM(ctx, "xb", hostsim.VMOptions{MemSize: 256 << 20, Tenant: 5})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newXend(t, ctx, va), newXend(t, ctx, vb)
	if ga, gb := va.Driver.GID(), vb.Driver.GID(); ga[7] != 1 || gb[7] != 2 {
		t.Fatalf("GIDs %x and %x are not in the hosts' prefixes", ga, gb)
	}
	a.connect(t, ctx, b, a.qp.DefaultRCConnect(b.qp.Endpoint()))
	b.connect(t, ctx, a, b.qp.DefaultRCConnect(a.qp.Endpoint()))

	// SEND gathered from two SGEs into a posted receive.
	fill(a.buf.Bytes()[:8192], 1)
	if err := b.qp.PostRecv(guestdriver.RecvWR{WRID: 7, SGL: []abi.SGE{b.mr.SGE(1<<20, 64<<10)}}); err != nil {
		t.Fatal(err)
	}
	wc := a.post(t, guestdriver.SendWR{WRID: 1, Opcode: abi.WRSend, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 3000), a.mr.SGE(4096, 4096)}})
	checkWC(t, "SEND", wc, 1, abi.WRSend, abi.WCSuccess)
	rwcs, err := pollWCs(b.cq, 1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r := rwcs[0]; r.WRID != 7 || r.Status != abi.WCSuccess || r.ByteLen != 7096 || r.SrcQP != a.qp.Num() {
		t.Fatalf("RECV %+v", r)
	}
	want := append(bytes.Clone(a.buf.Bytes()[:3000]), a.buf.Bytes()[4096:8192]...)
	if got := b.buf.Bytes()[1<<20 : 1<<20+7096]; !bytes.Equal(got, want) {
		t.Fatalf("SEND payload differs at %d", firstDiff(got, want))
	}

	// A 3 MiB WRITE: hundreds of packets placed straight into b's memory.
	src := a.buf.Bytes()[:3<<20]
	fill(src, 2)
	wc = a.post(t, guestdriver.SendWR{WRID: 2, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 3<<20)}, RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()})
	checkWC(t, "WRITE", wc, 2, abi.WRRDMAWrite, abi.WCSuccess)
	if got := b.buf.Bytes()[4096 : 4096+3<<20]; !bytes.Equal(got, src) {
		t.Fatalf("WRITE differs at %d", firstDiff(got, src))
	}

	// WRITE_WITH_IMM consumes a receive and carries the immediate.
	if err := b.qp.PostRecv(guestdriver.RecvWR{WRID: 8}); err != nil {
		t.Fatal(err)
	}
	wc = a.post(t, guestdriver.SendWR{WRID: 3, Opcode: abi.WRRDMAWriteWithImm, Signaled: true, Imm: 0xfeedbeef,
		SGL: []abi.SGE{a.mr.SGE(0, 100)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	checkWC(t, "WRITE_IMM", wc, 3, abi.WRRDMAWriteWithImm, abi.WCSuccess)
	if rwcs, err = pollWCs(b.cq, 1, 10*time.Second); err != nil || rwcs[0].Imm != 0xfeedbeef || rwcs[0].WRID != 8 {
		t.Fatalf("WRITE_IMM receive %+v %v", rwcs, err)
	}

	// READ 1 MiB of b's memory back.
	fill(b.buf.Bytes()[2<<20:3<<20], 3)
	clear(a.buf.Bytes()[:1<<20])
	wc = a.post(t, guestdriver.SendWR{WRID: 4, Opcode: abi.WRRDMARead, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 1<<20)}, RemoteAddr: b.mr.IOVA() + 2<<20, RKey: b.mr.RKey()})
	checkWC(t, "READ", wc, 4, abi.WRRDMARead, abi.WCSuccess)
	if got, want := a.buf.Bytes()[:1<<20], b.buf.Bytes()[2<<20:3<<20]; !bytes.Equal(got, want) {
		t.Fatalf("READ differs at %d", firstDiff(got, want))
	}

	// Atomics, each executed once.
	ctr := b.buf.Bytes()[xbuf-8:]
	binary.LittleEndian.PutUint64(ctr, 40)
	for i := range 3 {
		wc = a.post(t, guestdriver.SendWR{WRID: uint64(10 + i), Opcode: abi.WRAtomicFetchAdd, Signaled: true,
			SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA() + xbuf - 8, RKey: b.mr.RKey(), CompareAdd: 1})
		checkWC(t, "FETCH_ADD", wc, uint64(10+i), abi.WRAtomicFetchAdd, abi.WCSuccess)
		if v := binary.LittleEndian.Uint64(a.buf.Bytes()); v != uint64(40+i) {
			t.Fatalf("FETCH_ADD %d returned %d", i, v)
		}
	}
	wc = a.post(t, guestdriver.SendWR{WRID: 20, Opcode: abi.WRAtomicCmpSwap, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA() + xbuf - 8, RKey: b.mr.RKey(), CompareAdd: 43, Swap: 1000})
	checkWC(t, "CMP_SWAP", wc, 20, abi.WRAtomicCmpSwap, abi.WCSuccess)
	if got := binary.LittleEndian.Uint64(ctr); got != 1000 {
		t.Fatalf("counter %d after CMP_SWAP, want 1000", got)
	}

	// A forged rkey is refused by the remote device and writes nothing.
	before := bytes.Clone(b.buf.Bytes()[:4096])
	wc = a.post(t, guestdriver.SendWR{WRID: 30, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x100})
	checkWC(t, "forged WRITE", wc, 30, abi.WRRDMAWrite, abi.WCRemAccessErr)
	if !bytes.Equal(before, b.buf.Bytes()[:4096]) {
		t.Fatal("a refused WRITE changed memory")
	}
	for i, h := range p.Hosts {
		st := h.Fabric().Stats()
		t.Logf("host %d fabric: %+v", i+1, st)
	}
}

// TestCrossHostTenantMismatch: QPs of different tenants cannot talk
// across hosts: the packets carry the wrong tenant and token, are dropped
// and counted, and the requester fails after its retries.
func TestCrossHostTenantMismatch(t *testing.T) {
	needNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := hostsim.NewPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsxt"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	va, err := p.Hosts[0].AddVM(ctx, "ta", hostsim.VMOptions{MemSize: 64 << 20, Tenant: 1})
	if err != nil {
		t.Fatal(err)
	}
	vb, err := p.Hosts[1].AddVM(ctx, "tb", hostsim.VMOptions{MemSize: 64 << 20, Tenant: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newXend(t, ctx, va), newXend(t, ctx, vb)
	a.connect(t, ctx, b, fastConn(a.qp, b.qp.Endpoint()))
	b.connect(t, ctx, a, fastConn(b.qp, a.qp.Endpoint()))
	before := bytes.Clone(b.buf.Bytes()[:4096])
	wc := a.post(t, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	checkWC(t, "cross-tenant WRITE", wc, 1, abi.WRRDMAWrite, abi.WCRetryExcErr)
	if !bytes.Equal(before, b.buf.Bytes()[:4096]) {
		t.Fatal("another tenant's WRITE landed")
	}
	if st := p.Hosts[1].Fabric().Stats(); st.UnknownConn+st.Foreign == 0 {
		t.Fatalf("host 2 counted no foreign packet: %+v", st)
	}
}

// TestCrossHostPeerKilled: a real vstellard process serving the far VM
// is killed (SIGKILL) while the near VM streams WRITEs to it. The near
// QP goes to ERR within its retry limit, its outstanding WRITEs complete
// with errors (RETRY_EXC_ERR, then WR_FLUSH_ERR), and both guests live
// on: the near one's device still serves commands.
func TestCrossHostPeerKilled(t *testing.T) {
	needNamespaces(t)
	bin, err := buildDaemon()
	if err != nil {
		t.Fatalf("building vstellard: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bed, err := netlab.TwoHost(ctx, netlab.Options{Prefix: "vsxk"})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	h1, h2 := bed.Hosts()[0], bed.Hosts()[1]
	dir := t.TempDir()
	secret := filepath.Join(dir, "key")
	if err := os.WriteFile(secret, []byte("0123456789abcdef-cluster-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	p1, p2 := netip.MustParsePrefix("fd00:0:0:1::/64"), netip.MustParsePrefix("fd00:0:0:2::/64")
	a1, a2 := netip.AddrPortFrom(h1.Addr(), 4791), netip.AddrPortFrom(h2.Addr(), 4791)

	// Host 2: the vstellard binary, started from a thread inside its
	// namespace (the child inherits the thread's network namespace).
	runDir, err := os.MkdirTemp("", "vsxk-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runDir)
	proc := exec.Command(bin, "--run-dir", runDir, "--device", "kb", "--log-level", "debug",
		"--fabric-listen", a2.String(), "--gid-prefix", p2.String(), "--fabric-secret-file", secret,
		"--peer", fmt.Sprintf("%v=%v", p1, a1))
	logs := &syncBuffer{}
	proc.Stdout, proc.Stderr = logs, logs
	if err := h2.Do(proc.Start); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	defer func() {
		proc.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("host 2 vstellard:\n%s", logs.String())
		}
	}()
	sock := filepath.Join(runDir, "kb.sock")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host 2 vstellard not ready:\n%s", logs.String())
		}
	}

	// Host 1: an in-process daemon whose fabric lives in namespace 1.
	host1, err := hostsim.New(ctx, hostsim.Options{ListenIn: h1.Do, Fabric: &daemon.FabricSpec{
		Listen: a1, GIDPrefix: p1, SecretFile: secret, Peers: []remote.Peer{{GIDPrefix: p2, Addr: a2}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer host1.Close()
	va, err := host1.AddVM(ctx, "ka", hostsim.VMOptions{MemSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vmB, drvB := bootVM(t, sock, 64<<20)
	a := newXend(t, ctx, va)
	b := newXend(t, ctx, &hostsim.VM{Name: "kb", VM: vmB, Driver: drvB})
	c := a.qp.DefaultRCConnect(b.qp.Endpoint())
	c.Timeout, c.RetryCnt = 10, 3 // 4 ms timeouts, 3 retries
	a.connect(t, ctx, b, c)
	b.connect(t, ctx, a, b.qp.DefaultRCConnect(a.qp.Endpoint()))
	wc := a.post(t, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 1<<20)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	checkWC(t, "WRITE before the kill", wc, 1, abi.WRRDMAWrite, abi.WCSuccess)

	// Stream, then kill host 2's daemon mid-transfer.
	const n = 16
	for i := range n {
		if err := a.qp.PostSend(guestdriver.SendWR{WRID: uint64(100 + i), Opcode: abi.WRRDMAWrite, Signaled: true,
			SGL: []abi.SGE{a.mr.SGE(0, 1<<20)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wcs, err := pollWCs(a.cq, n, 20*time.Second)
	if err != nil {
		t.Fatalf("the near QP hangs after the peer was killed: %v", err)
	}
	took := time.Since(killed)
	failed := 0
	for i, wc := range wcs {
		if wc.WRID != uint64(100+i) {
			t.Fatalf("completion %d is of WR %d", i, wc.WRID)
		}
		switch {
		case wc.Status == abi.WCSuccess && failed == 0:
		case wc.Status == abi.WCRetryExcErr && failed == 0, wc.Status == abi.WCWRFlushErr && failed > 0:
			failed++
		default:
			t.Fatalf("completion %d: %v (after %d failures)", i, wc.Status, failed)
		}
	}
	if failed == 0 {
		t.Fatal("every WRITE succeeded although the peer was killed")
	}
	t.Logf("%d of %d WRITEs failed; the QP failed %v after the kill", failed, n, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("the near QP took %v to fail", took)
	}
	// The near guest lives on: its device answers, and a new QP can be made.
	if _, err := va.Driver.QueryDevice(ctx); err != nil {
		t.Fatalf("near device after the kill: %v", err)
	}
	if _, err := a.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: a.cq, RecvCQ: a.cq, Cap: guestdriver.QPCap{SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatalf("CREATE_QP after the kill: %v", err)
	}
	if err := <-exited; err == nil || !errors.As(err, new(*exec.ExitError)) {
		t.Fatalf("host 2 vstellard: %v", err)
	}
	exited <- nil // for the deferred wait
}
