package guestdriver_test

import (
	"errors"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/testkit/hosttest"
	"github.com/vstellar/vstellar/internal/testkit/verbstest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestSourceGIDIsChecked: a QP sends from the GID its address vector's
// sgid_index names, the peer accepts it as that address, and once the
// guest deletes that GID the QP can no longer send from it (so it can
// never claim an address another device might take next).
func TestSourceGIDIsChecked(t *testing.T) {
	ctx, h := hosttest.Start(t, 30*time.Second, hostsim.Options{})
	mk := func(name string) (*hostsim.VM, *verbstest.End) {
		vm, err := h.AddVM(ctx, name, hostsim.VMOptions{MemSize: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		e, err := verbstest.New(ctx, vm.Driver, verbstest.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return vm, e
	}
	va, a := mk("sgid-a")
	_, b := mk("sgid-b")
	alias := abi.GID{0xfd, 0x00, 0x5e, 0x11, 15: 0x0a}
	if err := va.Driver.AddGID(ctx, 3, alias); err != nil {
		t.Fatal(err)
	}
	ca := a.QP.DefaultRCConnect(b.QP.Endpoint())
	ca.SGIDIndex, ca.Timeout, ca.RetryCnt = 3, 8, 1
	if err := a.QP.Connect(ctx, ca); err != nil {
		t.Fatal(err)
	}
	// b knows a by its alias, not by a's GID 0.
	if err := b.QP.ConnectTo(ctx, guestdriver.Endpoint{GID: alias, QPN: a.QP.Num(), PSN: a.QP.PSN()}); err != nil {
		t.Fatal(err)
	}
	write := func(id uint64) guestdriver.WC {
		t.Helper()
		if err := a.QP.PostSend(guestdriver.SendWR{WRID: id, Opcode: abi.WRRDMAWrite, Signaled: true,
			SGL: []abi.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		var wc [1]guestdriver.WC
		for a.SCQ.Poll(wc[:]) == 0 {
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
