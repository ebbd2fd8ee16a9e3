package device

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

// TestTenThousandAndFirstQP: a device limited to 10000 QPs creates 10000
// and answers the 10001st with NO_RESOURCES, allocating nothing. Commands
// go in batches of batchMax per kick, as a driver with a deep control
// queue sends them.
func TestTenThousandAndFirstQP(t *testing.T) {
	const maxQP = 10000
	d := newDevice(t, Config{Limits: abi.Limits{MaxQP: maxQP}})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	cq := g.createCQ(16)
	// The smallest rings: one 64-byte send WQE and one 16-byte receive WQE
	// per QP, all in one array.
	ss, rs := uint64(abi.SendWQEStride(0, 0)), uint64(abi.RecvWQEStride(0))
	sqs := g.alloc(maxQP*ss, ss)
	rqs := g.alloc(maxQP*rs, rs)
	req := func(i uint64) []byte {
		return enc(abi.OpCreateQP, &abi.CreateQPReq{PDN: pdn, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN,
			SQSize: 1, RQSize: 1, SQAddr: sqs + i*ss, RQAddr: rqs + i*rs})
	}
	for i := uint64(0); i < maxQP; {
		var reqs [][]byte
		for ; i < maxQP && len(reqs) < batchMax; i++ {
			reqs = append(reqs, req(i))
		}
		for j, st := range g.batch(reqs) {
			if st != abi.StatusOK {
				t.Fatalf("QP %d: %v", int(i)-len(reqs)+j, st)
			}
		}
	}
	if n := d.Objects().QPs; n != maxQP {
		t.Fatalf("%d QPs", n)
	}
	// The 10001st: a status, no allocation, and the device goes on.
	var q abi.CreateQPResp
	if st := g.do(abi.OpCreateQP, &abi.CreateQPReq{PDN: pdn, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN,
		SQSize: 1, RQSize: 1, SQAddr: sqs, RQAddr: rqs}, &q); st != abi.StatusNoResources {
		t.Fatalf("QP 10001: %v", st)
	}
	if n := d.Objects().QPs; n != maxQP {
		t.Fatalf("%d QPs after the refused one", n)
	}
	// The last QP has the last number and doorbell record.
	var qr abi.QueryQPResp
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: maxQP + 1}, &qr)
	if qr.Cap.SQSize != 1 || qr.Cap.PDN != pdn {
		t.Fatalf("QP %d: %+v", maxQP+1, qr.Cap)
	}
	g.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: maxQP + 2})
	// Freeing one makes room for exactly one.
	g.must(abi.OpDestroyQP, &abi.HandleReq{Handle: 5000}, nil)
	g.must(abi.OpCreateQP, &abi.CreateQPReq{PDN: pdn, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN,
		SQSize: 1, RQSize: 1, SQAddr: sqs + (5000-2)*ss, RQAddr: rqs + (5000-2)*rs}, &q)
	if q.QPN != 5000 || q.DoorbellIndex != 5000-2 {
		t.Fatalf("reused slot: %+v", q)
	}
	g.want(abi.StatusNoResources, abi.OpCreateQP, &abi.CreateQPReq{PDN: pdn, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN,
		SQSize: 1, RQSize: 1, SQAddr: sqs, RQAddr: rqs})
	// Everything goes with RESET_STATE.
	g.must(abi.OpResetState, nil, nil)
	if o := d.Objects(); o.QPs != 0 || o.CQs != 0 || o.PDs != 0 {
		t.Fatalf("after reset: %+v", o)
	}
}

// TestLimitsPerKind: every kind of object stops at its limit with
// NO_RESOURCES and nothing allocated.
func TestLimitsPerKind(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxQP: 2, MaxCQ: 2, MaxMR: 2, MaxPD: 2, MaxAH: 2}})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	g.allocPD()
	g.want(abi.StatusNoResources, abi.OpAllocPD, nil)
	cq := g.createCQ(4)
	g.createCQ(4)
	g.want(abi.StatusNoResources, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: g.cqRing(4), Entries: 4})
	g.createQP(pdn, cq.CQN, cq.CQN)
	g.createQP(pdn, cq.CQN, cq.CQN)
	g.want(abi.StatusNoResources, abi.OpCreateQP, g.qpReq(pdn, cq.CQN, cq.CQN))
	g.regMR(pdn, 0, 4096)
	_, gpa := g.regMR(pdn, 0, 4096)
	g.want(abi.StatusNoResources, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: gpa, Length: 4096, Addr: gpa})
	av := &abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(1)}}
	g.must(abi.OpCreateAH, av, nil)
	g.must(abi.OpCreateAH, av, nil)
	g.want(abi.StatusNoResources, abi.OpCreateAH, av)
	if o := d.Objects(); o != (Objects{PDs: 2, CQs: 2, QPs: 2, MRs: 2, AHs: 2, GIDs: 1}) {
		t.Fatalf("objects %+v", o)
	}
}

// TestCommandFlood: thousands of hostile commands (every opcode with
// random payloads, forged handles, wrong sizes, unknown opcodes) each get
// a status; nothing is created that was not asked for properly, and the
// daemon's memory does not grow with the flood.
func TestCommandFlood(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxPD: 4}})
	g := startVM(t, d, vmOpts{})
	rng := rand.New(rand.NewPCG(1, 2))
	ops := abi.Opcodes()
	hostile := func() []byte {
		switch rng.IntN(4) {
		case 0: // an unknown opcode
			return abi.AppendRequest(nil, abi.Opcode(100+rng.IntN(1000)), nil)
		case 1: // the right size, random bytes
			op := ops[rng.IntN(len(ops))]
			n, _ := op.RequestSize()
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			return abi.AppendRequest(nil, op, p)
		case 2: // the wrong size
			op := ops[rng.IntN(len(ops))]
			n, _ := op.RequestSize()
			return abi.AppendRequest(nil, op, make([]byte, n+1+rng.IntN(32)))
		}
		// A well-formed destroy of a forged handle.
		destroys := []abi.Opcode{abi.OpDeallocPD, abi.OpDestroyCQ, abi.OpDestroyQP, abi.OpDeregMR, abi.OpDestroyAH, abi.OpQueryQP}
		return enc(destroys[rng.IntN(len(destroys))], &abi.HandleReq{Handle: rng.Uint32()})
	}
	flood := func(n int) map[abi.Status]int {
		seen := map[abi.Status]int{}
		for sent := 0; sent < n; {
			var reqs [][]byte
			for ; sent < n && len(reqs) < batchMax; sent++ {
				reqs = append(reqs, hostile())
			}
			for _, st := range g.batch(reqs) {
				if !st.Known() {
					t.Fatalf("undefined status %d", st)
				}
				seen[st]++
			}
		}
		return seen
	}
	flood(2000) // warm up: buffers, maps and pools reach their size
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	seen := flood(8000)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 4<<20 {
		t.Errorf("heap grew by %d bytes over 8000 hostile commands", grew)
	}
	if seen[abi.StatusInvalidOpcode] == 0 || seen[abi.StatusInvalidArgument] == 0 || seen[abi.StatusNotFound] == 0 {
		t.Errorf("statuses %v", seen)
	}
	// Whatever random bytes managed to create stays within the limits.
	o := d.Objects()
	if o.PDs > 4 || o.QPs > int(d.Limits().MaxQP) {
		t.Fatalf("objects %+v", o)
	}
	s := d.Stats()
	if s.Commands != 10000 || s.BadChains != 0 {
		t.Fatalf("stats: %d commands, %d bad chains", s.Commands, s.BadChains)
	}
	// The device still works.
	g.must(abi.OpResetState, nil, nil)
	if p := g.allocPD(); p != 1 {
		t.Fatalf("PDN %d after the flood", p)
	}
}
