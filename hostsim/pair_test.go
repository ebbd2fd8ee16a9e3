package hostsim

import (
	"context"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestPairLoopback: the fallback a machine without namespaces gets (the
// demo's two hosts without root): two daemons on loopback, each with its
// fabric, and a WRITE from a VM on one into a VM on the other.
func TestPairLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPair(ctx, PairOptions{Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Bed != nil || p.Where != "loopback" {
		t.Fatalf("bed %v, where %q", p.Bed, p.Where)
	}
	var vms [2]*VM
	var qps [2]*guestdriver.QP
	var cqs [2]*guestdriver.CQ
	var mrs [2]*guestdriver.MR
	for i, h := range p.Hosts {
		if vms[i], err = h.AddVM(ctx, []string{"la", "lb"}[i], VMOptions{MemSize: 64 << 20}); err != nil {
			t.Fatal(err)
		}
		d := vms[i].Driver
		pd, err := d.AllocPD(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cqs[i], err = d.CreateCQ(ctx, 8); err != nil {
			t.Fatal(err)
		}
		if qps[i], err = pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: cqs[i], RecvCQ: cqs[i],
			Cap: guestdriver.QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		buf, err := d.Alloc(1<<20, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if mrs[i], err = pd.RegMR(ctx, buf, abi.AccessAll); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := qps[i].ConnectTo(ctx, vms[1-i].Driver.GID(), qps[1-i].Num()); err != nil {
			t.Fatal(err)
		}
	}
	src := mrs[0].Buffer().Bytes()
	for i := range src {
		src[i] = byte(i * 13)
	}
	if err := qps[0].PostSend(guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{mrs[0].SGE(0, 1<<20)}, RemoteAddr: mrs[1].IOVA(), RKey: mrs[1].RKey()}); err != nil {
		t.Fatal(err)
	}
	var wc [1]guestdriver.WC
	for cqs[0].Poll(wc[:]) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := wc[0].Err(); err != nil {
		t.Fatal(err)
	}
	dst := mrs[1].Buffer().Bytes()
	for i := range dst {
		if dst[i] != src[i] {
			t.Fatalf("byte %d differs", i)
		}
	}
	if st := p.Hosts[1].Fabric().Stats(); st.Connections != 1 || st.Received == 0 {
		t.Fatalf("host 2 fabric %+v", st)
	}
}
