package device

import (
	"testing"

	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestPauseAndReconnectKeepObjects: a VM pause (SET_STATUS 0, then
// DRIVER_OK again) and a back-end reconnect deactivate the device without
// a reset; the driver's objects are all there afterwards and the engine
// runs again.
func TestPauseAndReconnectKeepObjects(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	key, mrGPA := g.regMR(pdn, abi.AccessLocalWrite, 4096)
	copy(g.bytes(mrGPA, 4), "kept")
	cq := g.createCQ(8)
	q := g.createQP(pdn, cq.CQN, cq.CQN)
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(1)}, nil)
	want := d.Objects()

	check := func(when string) {
		t.Helper()
		wait.For(t, "activation", d.active.Load)
		if o := d.Objects(); o != want {
			t.Fatalf("%s: objects %+v, want %+v", when, o, want)
		}
		var qr abi.QueryQPResp
		g.must(abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN}, &qr)
		// The MR is bound to the new connection's mapping of guest RAM.
		if got, err := translate(t, d, key, pdn, mrGPA, 4); err != nil || string(got) != "kept" {
			t.Fatalf("%s: MR: %q %v", when, got, err)
		}
		// The engine runs: new CQs can be created.
		c := g.createCQ(4)
		g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: c.CQN}, nil)
	}
	if err := g.vm.Stop(g.ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "deactivation", func() bool { return !d.active.Load() && d.DoorbellMode() == DoorbellNone })
	if err := g.vm.Start(g.ctx); err != nil {
		t.Fatal(err)
	}
	check("after a pause")
	if err := g.vm.Reconnect(g.ctx); err != nil {
		t.Fatal(err)
	}
	check("after a reconnect")
	if s := d.Stats(); s.Activations != 3 || s.Resets != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestResetDropsObjects: RESET_DEVICE (the VMM resetting the device) and
// the driver's RESET_STATE drop every object: handles and keys from
// before name nothing, and the doorbell records are zero.
func TestResetDropsObjects(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	build := func() (uint32, abi.CreateQPResp) {
		pdn := g.allocPD()
		key, _ := g.regMR(pdn, abi.AccessLocalWrite, 4096)
		cq := g.createCQ(8)
		q := g.createQP(pdn, cq.CQN, cq.CQN)
		g.must(abi.OpCreateAH, &abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(2)}}, nil)
		g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(1)}, nil)
		g.doorbell(q.DoorbellIndex).StoreUint32Release(abi.QPDoorbellOffRQProd, 0) // the record is mapped
		return key, q
	}
	empty := Objects{GIDs: 1}
	key, q := build()
	g.must(abi.OpResetState, nil, nil)
	if o := d.Objects(); o != empty {
		t.Fatalf("after RESET_STATE: %+v", o)
	}
	g.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: key})
	g.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN})
	g.want(abi.StatusNotFound, abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 1})

	key, _ = build()
	if err := g.vm.Frontend().ResetDevice(g.ctx); err != nil {
		t.Fatal(err)
	}
	// RESET_DEVICE has no reply: wait for the back-end to get to it.
	wait.For(t, "RESET_DEVICE", func() bool { return d.Objects() == empty })
	if _, err := translate(t, d, key, 1, 0, 0); err == nil {
		t.Fatal("MR key survived RESET_DEVICE")
	}
	for i, b := range d.DoorbellRegion().View().Bytes() {
		if b != 0 {
			t.Fatalf("doorbell byte %d = %#x after reset", i, b)
		}
	}
}
