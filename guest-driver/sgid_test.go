package guestdriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestSourceGIDIsChecked: a QP sends from the GID its address vector's
// sgid_index names, the peer accepts it as that address, and once the
// guest deletes that GID the QP can no longer send from it (so it can
// never claim an address another device might take next).
func TestSourceGIDIsChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	type side struct {
		pd *guestdriver.PD
		cq *guestdriver.CQ
		qp *guestdriver.QP
		mr *guestdriver.MR
	}
	mk := func(name string) (*hostsim.VM, side) {
		vm, err := h.AddVM(ctx, name, hostsim.VMOptions{MemSize: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var s side
		d := vm.Driver
		if s.pd, err = d.AllocPD(ctx); err != nil {
			t.Fatal(err)
		}
		if s.cq, err = d.CreateCQ(ctx, 16); err != nil {
			t.Fatal(err)
		}
		if s.qp, err = s.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: s.cq, RecvCQ: s.cq,
			Cap: guestdriver.QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		buf, err := d.Alloc(4096, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if s.mr, err = s.pd.RegMR(ctx, buf, abi.AccessAll); err != nil {
			t.Fatal(err)
		}
		return vm, s
	}
	va, a := mk("sgid-a")
	_, b := mk("sgid-b")
	alias := abi.GID{0xfd, 0x00, 0x5e, 0x11, 15: 0x0a}
	if err := va.Driver.AddGID(ctx, 3, alias); err != nil {
		t.Fatal(err)
	}
	ca := a.qp.DefaultRCConnect(b.qp.Endpoint())
	ca.SGIDIndex, ca.Timeout, ca.RetryCnt = 3, 8, 1
	if err := a.qp.Connect(ctx, ca); err != nil {
		t.Fatal(err)
	}
	// b knows a by its alias, not by a's GID 0.
	if err := b.qp.ConnectTo(ctx, guestdriver.Endpoint{GID: alias, QPN: a.qp.Num(), PSN: a.qp.PSN()}); err != nil {
		t.Fatal(err)
	}
	write := func(id uint64) guestdriver.WC {
		t.Helper()
		if err := a.qp.PostSend(guestdriver.SendWR{WRID: id, Opcode: abi.WRRDMAWrite, Signaled: true,
			SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		var wc [1]guestdriver.WC
		for a.cq.Poll(wc[:]) == 0 {
			if ctx.Err() != nil {
				t.Fatal("no completion")
			}
			time.Sleep(50 * time.Microsecond)
		}
		return wc[0]
	}
	if wc := write(1); wc.Status != abi.WCSuccess {
		t.Fatalf("WRITE from the alias GID: %v", wc.Status)
	}
	if err := va.Driver.DelGID(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if wc := write(2); !errors.Is(wc.Err(), abi.WCLocQPOpErr) {
		t.Fatalf("WRITE from a deleted GID: %v, want LOC_QP_OP_ERR", wc.Status)
	}
}
