package hostile

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Guest memory: tables that overlap, wrap, lie about their file, or
// change under running rings. A bad table is refused and the previous one
// stays; memory that disappears under the device (a shrunk memfd) is a
// fault of that device alone (docs/spec.md §14).

func TestMemory(t *testing.T) {
	runCases(t, memoryCases)
}

var memoryCases = []hostileCase{
	{"overlapping regions", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 4<<20)
		wantNack(t, f, reqSetMemTable, memTable(
			region{0, 2 << 20, userAddrBase, 0},
			region{1 << 20, 2 << 20, userAddrBase + 8<<20, 0}), ram.fd, ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(
			region{0, 1 << 20, userAddrBase, 0},
			region{8 << 20, 1 << 20, userAddrBase + 512<<10, 1 << 20}), ram.fd, ram.fd)
		wantAlive(t, f)
	}},
	{"zero-sized region", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 0, userAddrBase, 0}), ram.fd)
		wantAlive(t, f)
	}},
	{"region larger than the file", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 40, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 2 << 20, userAddrBase, 0}), ram.fd)
		wantAlive(t, f)
	}},
	{"huge and wrapping regions", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 62, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(region{^uint64(0) - 4095, 1 << 20, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 20, ^uint64(0) - 4095, 0}), ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 20, userAddrBase, ^uint64(0) - 4095}), ram.fd)
		wantAlive(t, f)
	}},
	{"offset past the end of the file", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 20, userAddrBase, 4 << 20}), ram.fd)
		wantNack(t, f, reqSetMemTable, memTable(region{0, 1 << 20, userAddrBase, 512 << 10}), ram.fd)
		wantAlive(t, f)
	}},
	{"descriptors that cannot be guest memory", func(t *testing.T, e *env) {
		f, _ := ownedWithRAM(t, e, 1<<20)
		r := memTable(region{0, 1 << 20, userAddrBase, 0})
		wantNack(t, f, reqSetMemTable, r, pipeFD(t))
		wantNack(t, f, reqSetMemTable, r, newEventFD(t))
		wantNack(t, f, reqSetMemTable, r, devNull(t))
		wantAlive(t, f)
	}},
	{"more regions than a table holds", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		rs := make([]region, 9)
		fds := make([]int, 8)
		for i := range rs {
			rs[i] = region{uint64(i) << 20, 4096, userAddrBase + uint64(i)<<20, 0}
		}
		for i := range fds {
			fds[i] = ram.fd
		}
		wantNack(t, f, reqSetMemTable, memTable(rs...), fds...)
		for _, n := range []uint32{0, 9, 1 << 31, ^uint32(0)} {
			p := memTable(rs[:8]...)
			le.PutUint32(p, n)
			wantNack(t, f, reqSetMemTable, p, fds...)
		}
		wantAlive(t, f)
	}},
	{"more regions than slots", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		if !memSlotsOffered(t, f) {
			wantNack(t, f, reqAddMemReg, memReg(region{0, 4096, userAddrBase, 0}), ram.fd)
			return
		}
		body, err := f.get(reqGetMaxMemSlots, nil)
		if err != nil || len(body) != 8 {
			t.Fatalf("GET_MAX_MEM_SLOTS: %x %v", body, err)
		}
		slots := le.Uint64(body)
		// Each region maps the same 4 KiB page of the file at another GPA.
		var refused bool
		for i := uint64(0); i <= slots && i < 1024; i++ {
			r := region{i << 20, 4096, userAddrBase + i<<20, 0}
			if err := f.ask(reqAddMemReg, memReg(r), ram.fd); err != nil {
				if i < slots {
					t.Fatalf("ADD_MEM_REG %d of %d slots: %v", i+1, slots, err)
				}
				refused = true
			}
		}
		if !refused {
			t.Errorf("ADD_MEM_REG beyond the %d slots GET_MAX_MEM_SLOTS promised succeeded", slots)
		}
		wantAlive(t, f)
	}},
	{"ADD_MEM_REG overlapping", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 2<<20)
		if !memSlotsOffered(t, f) {
			wantNack(t, f, reqAddMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}), ram.fd)
			return
		}
		f.mustAsk(reqAddMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqAddMemReg, memReg(region{512 << 10, 1 << 20, userAddrBase + 4<<20, 0}), ram.fd)
		wantNack(t, f, reqAddMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqAddMemReg, memReg(region{4 << 20, 1 << 20, userAddrBase + 512<<10, 0}), ram.fd)
		wantAlive(t, f)
	}},
	{"REM_MEM_REG unknown", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 2<<20)
		wantNack(t, f, reqRemMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}))
		if !memSlotsOffered(t, f) {
			return
		}
		f.mustAsk(reqAddMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}), ram.fd)
		wantNack(t, f, reqRemMemReg, memReg(region{0, 512 << 10, userAddrBase, 0}))
		wantNack(t, f, reqRemMemReg, memReg(region{4 << 20, 1 << 20, userAddrBase + 4<<20, 0}))
		f.mustAsk(reqRemMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}))
		wantNack(t, f, reqRemMemReg, memReg(region{0, 1 << 20, userAddrBase, 0}))
		wantAlive(t, f)
	}},
	{"REM_MEM_REG under running rings", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		wantNack(t, s.frontEnd, reqRemMemReg, memReg(s.ram.region()))
		// The refused change left the rings where they were.
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"SET_MEM_TABLE without the rings' memory", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		other := newGuestRAM(t, 1<<20)
		wantNack(t, s.frontEnd, reqSetMemTable, memTable(region{8 << 20, 1 << 20, userAddrBase + 8<<20, 0}), other.fd)
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"shrink and kick", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		// A command waits in the ring when the memory goes.
		s.putDesc(abi.QueueControl, 0, cmdReq(0), 8, descNext, 1)
		s.putDesc(abi.QueueControl, 1, cmdResp(0), 4096, descWrite, 0)
		copy(s.ram.mem[cmdReq(0):], abi.AppendRequest(nil, abi.OpQueryDevice, nil))
		s.publish(abi.QueueControl, 0)
		s.ram.shrink(t, 4096)
		for q := range numQueues {
			kick(s.kicks[q])
		}
		time.Sleep(200 * time.Millisecond)
		for q := range numQueues {
			kick(s.kicks[q])
		}
		wantDaemonAlive(t, e, 500*time.Millisecond)
	}},
	{"shrink under live objects and kick", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.postEventBuffers(8)
		s.doorbellArea(0x200000)
		s.mustCommand(abi.OpCreateCQ, enc(&abi.CreateCQReq{RingAddr: 0x300000, Entries: 64}))
		s.mustCommand(abi.OpAllocPD, nil)
		s.ram.shrink(t, 4096)
		for range 3 {
			for q := range numQueues {
				kick(s.kicks[q])
			}
			time.Sleep(100 * time.Millisecond)
		}
		wantDaemonAlive(t, e, 300*time.Millisecond)
		wantNeedsReset(t, s)
	}},
	{"shrink to nothing and kick", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		s.ram.shrink(t, 0)
		for q := range numQueues {
			kick(s.kicks[q])
		}
		wantDaemonAlive(t, e, 500*time.Millisecond)
	}},
	{"shrink then wait", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		s.ram.shrink(t, 4096)
		wantDaemonAlive(t, e, time.Second)
	}},
	{"shrink then GET_VRING_BASE", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		s.ram.shrink(t, 4096)
		for q := range numQueues {
			if _, err := s.get(reqGetVringBase, vringState(uint32(q), 0)); err != nil {
				t.Errorf("GET_VRING_BASE %d after the shrink: %v", q, err)
			}
		}
		wantDaemonAlive(t, e, 200*time.Millisecond)
	}},
	{"shrink then a new memory table", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		s.ram.shrink(t, 4096)
		kick(s.kicks[abi.QueueControl])
		fresh := newGuestRAM(t, ramSize)
		// Accepted or refused, the daemon must live through it.
		s.ask(reqSetMemTable, memTable(fresh.region()), fresh.fd)
		kick(s.kicks[abi.QueueControl])
		wantDaemonAlive(t, e, 200*time.Millisecond)
	}},
}

// ownedWithRAM is an owned connection with a memfd of size bytes, the
// memory-slot feature negotiated, and no memory table yet.
func ownedWithRAM(t *testing.T, e *env, size uint64) (*frontEnd, *guestRAM) {
	t.Helper()
	return ownedFrontEnd(t, e), newGuestRAM(t, size)
}

// memSlotsOffered: the daemon offers CONFIGURE_MEM_SLOTS (today it
// withholds it; without it ADD_MEM_REG and REM_MEM_REG must be refused).
func memSlotsOffered(t *testing.T, f *frontEnd) bool {
	t.Helper()
	pf, err := f.get(reqGetProtocolFeatures, nil)
	if err != nil || len(pf) != 8 {
		t.Fatalf("GET_PROTOCOL_FEATURES: %x %v", pf, err)
	}
	return le.Uint64(pf)&protoMemSlots != 0
}

// wantDaemonAlive waits d and fails the case at once if the daemon died.
func wantDaemonAlive(t *testing.T, e *env, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if err := e.d.exitErr(); err != nil {
		t.Fatalf("vstellard died: %v\n%s", err, crashLines(e.d.Logs.String()))
	}
}
