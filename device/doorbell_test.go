package device

import (
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestDoorbellAreaFallback drives the guest-RAM fallback: both ways a
// front-end ends up there (no SHMEM protocol feature; a driver that does
// not ack SHMEM_DOORBELL), SET_DOORBELL_AREA's checks, and the area as IO
// memory that no MR and no ring may overlap.
func TestDoorbellAreaFallback(t *testing.T) {
	for name, o := range map[string]vmOpts{
		"no SHMEM protocol feature":     {noShmem: true},
		"driver without SHMEM_DOORBELL": {driverFeatures: vmsim.DefaultDriverFeatures &^ abi.FeatureShmemDoorbell.Mask()},
	} {
		t.Run(name, func(t *testing.T) {
			d := newDevice(t, Config{})
			g := startVM(t, d, o)
			if d.DoorbellMode() != DoorbellGuestRAM {
				t.Fatalf("mode %v", d.DoorbellMode())
			}
			var cfg abi.Config
			b := make([]byte, abi.ConfigSize)
			d.ReadConfig(0, b)
			if err := cfg.UnmarshalBinary(b); err != nil || cfg.Status != abi.ConfigStatusDoorbellGuestRAM {
				t.Fatalf("config status %#x %v", cfg.Status, err)
			}
			size := d.DoorbellLayout().Size()
			ps := uint64(d.DoorbellLayout().PageSize)
			pdn := g.allocPD()
			// An MR the area will be placed over.
			area := g.alloc(size+ps, ps)
			var mr abi.RegMRResp
			g.must(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: area + size, Length: ps, Addr: area + size}, &mr)

			ram := uint64(64 << 20)
			ctrl, event := g.vm.Queue(abi.QueueControl).Addrs(), g.vm.Queue(abi.QueueEvent).Addrs()
			for _, c := range []struct {
				name string
				req  abi.SetDoorbellAreaReq
				want abi.Status
			}{
				{"misaligned", abi.SetDoorbellAreaReq{Addr: area + 8, Length: size}, abi.StatusInvalidArgument},
				{"too small", abi.SetDoorbellAreaReq{Addr: area, Length: size - ps}, abi.StatusInvalidArgument},
				{"outside guest RAM", abi.SetDoorbellAreaReq{Addr: ram, Length: size}, abi.StatusBadAddress},
				{"straddles the end of RAM", abi.SetDoorbellAreaReq{Addr: ram - ps, Length: size}, abi.StatusBadAddress},
				{"wraps", abi.SetDoorbellAreaReq{Addr: ^uint64(0) &^ (ps - 1), Length: size}, abi.StatusBadAddress},
				{"over a live MR", abi.SetDoorbellAreaReq{Addr: area, Length: size + ps}, abi.StatusBadAddress},
				// Zeroed and written by the device, it would break the
				// device's own queues.
				{"over the control queue", abi.SetDoorbellAreaReq{Addr: ctrl.Used &^ (ps - 1), Length: size}, abi.StatusBadAddress},
				{"over the event queue", abi.SetDoorbellAreaReq{Addr: event.Desc &^ (ps - 1), Length: size}, abi.StatusBadAddress},
			} {
				if st := g.do(abi.OpSetDoorbellArea, &c.req, nil); st != c.want {
					t.Errorf("%s: %v, want %v", c.name, st, c.want)
				}
			}
			// Garbage the driver left in the area is cleared.
			copy(g.bytes(area, 8), "garbage!")
			g.must(abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size}, nil)
			if string(g.bytes(area, 8)) == "garbage!" {
				t.Fatal("area not cleared")
			}
			g.want(abi.StatusBadState, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size})

			// The area is IO memory: no MR over it (contiguous or by page
			// list), no ring in it.
			g.want(abi.StatusBadAddress, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: area, Length: 4096, Addr: area + ps})
			g.want(abi.StatusBadAddress, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 2 * ps, Addr: area - ps})
			g.want(abi.StatusBadAddress, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 4096, Addr: g.pageList([]uint64{area}), PageShift: 12, NPages: 1})
			if got := d.mtt.MemTypeOf(emtt.Span{GPA: area + size - 1, Len: 1}); got != emtt.MemIO {
				t.Fatalf("area is %v", got)
			}
			g.want(abi.StatusBadAddress, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: area, Entries: 4})
			// With doorbells in place, CQs and QPs can be created, and
			// their records are in the area.
			cq := g.createCQ(4)
			q := g.createQP(pdn, cq.CQN, cq.CQN)
			off, _ := d.DoorbellLayout().RecordOffset(q.DoorbellIndex)
			if v := memView(t, g.vm.Memory(), area+off, 4); v.Uint32(0) != 0 {
				t.Fatalf("QP record sq_prod %d", v.Uint32(0))
			}
			if n := d.Objects().MRs; n != 1 {
				t.Fatalf("%d MRs", n)
			}
		})
	}
}

// TestSetDoorbellAreaInShmemMode: with shared-memory doorbells there is no
// area to register.
func TestSetDoorbellAreaInShmemMode(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	if d.DoorbellMode() != DoorbellShmem {
		t.Fatalf("mode %v", d.DoorbellMode())
	}
	size := d.DoorbellLayout().Size()
	area := g.alloc(size, 4096)
	g.want(abi.StatusBadState, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size})
	// Not IO memory: an MR there is fine.
	g.must(abi.OpRegMR, &abi.RegMRReq{PDN: g.allocPD(), IOVA: area, Length: size, Addr: area}, nil)
}

// TestFallbackSurvivesReconnect: a reconnect (Deactivate without reset)
// keeps the doorbell area and the objects; after a reset the driver must
// register the area again.
func TestFallbackSurvivesReconnect(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{noShmem: true})
	size := d.DoorbellLayout().Size()
	area := g.alloc(size, 4096)
	g.must(abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size}, nil)
	cq := g.createCQ(4)
	if err := g.vm.Reconnect(g.ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "re-activation", d.active.Load)
	// The engine is back on the area without a new SET_DOORBELL_AREA, and
	// the CQ is still there.
	if c2 := g.createCQ(4); c2.CQN != cq.CQN+1 {
		t.Fatalf("CQN %d after reconnect", c2.CQN)
	}
	g.want(abi.StatusBadState, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size})
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: cq.CQN}, nil)
	// RESET_STATE forgets the area: CQs wait for a new one.
	g.must(abi.OpResetState, nil, nil)
	g.want(abi.StatusBadState, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: g.cqRing(4), Entries: 4})
	g.must(abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: area, Length: size}, nil)
	if c := g.createCQ(4); c.CQN != 1 {
		t.Fatalf("CQN %d after reset", c.CQN)
	}
}

// TestFallbackAreaRemovedRebindsMRs: when the memory under the guest-RAM
// doorbell area goes away, the engine stays stopped (DEVICE_FATAL), but
// the MRs still move onto the new memory table: one over the removed
// memory is invalidated rather than left translating into the old,
// unmapped table, and one elsewhere still reads the guest's bytes.
func TestFallbackAreaRemovedRebindsMRs(t *testing.T) {
	d := newDevice(t, Config{})
	// 2.5 GiB: guest RAM is [0, 2 GiB) plus [4 GiB, 4.5 GiB).
	g := startVM(t, d, vmOpts{noShmem: true, memSize: 5 << 29})
	bufs := g.postEventBuffers(2, abi.EventSize)
	pdn := g.allocPD()
	low, lowGPA := g.regMR(pdn, abi.AccessLocalWrite, 4096)
	const highGPA = 4 << 30
	size := d.DoorbellLayout().Size()
	g.must(abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: highGPA, Length: size}, nil)
	var r abi.RegMRResp
	g.must(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, IOVA: highGPA + size, Length: 1 << 20, Addr: highGPA + size}, &r)
	regs := g.vm.Regions()
	if len(regs) != 2 || regs[1].GuestPhys != highGPA {
		t.Fatalf("regions %+v", regs)
	}
	if err := g.vm.Frontend().RemMemReg(g.ctx, regs[1]); err != nil {
		t.Fatal(err)
	}
	got, err := g.waitEvents(1, 5*time.Second)
	if err != nil {
		t.Fatalf("no event after the doorbell area went away: %v", err)
	}
	if e := g.readEvent(bufs[got[0].head], got[0]); e.Type != abi.EventDeviceFatal {
		t.Fatalf("event %+v", e)
	}
	if _, err := translate(t, d, r.LKey, pdn, highGPA+size, 8); !errors.Is(err, emtt.ErrInvalidated) {
		t.Fatalf("MR over removed memory: %v", err)
	}
	copy(g.bytes(lowGPA, 4), "live")
	if b, err := translate(t, d, low, pdn, lowGPA, 4); err != nil || string(b) != "live" {
		t.Fatalf("MR in remaining memory: %q %v", b, err)
	}
}
