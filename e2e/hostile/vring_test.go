package hostile

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Virtqueues: sizes, addresses and indices a front-end sets, and rings a
// guest breaks. A bad setting is refused; a ring broken at run time stops
// that queue and sets DEVICE_NEEDS_RESET (docs/spec.md §14).

func TestVring(t *testing.T) {
	runCases(t, vringCases)
}

const statusNeedsReset = 0x40

var vringCases = []hostileCase{
	{"SET_VRING_NUM out of range", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		for _, n := range []uint32{0, 3, 100, 2048, 1 << 15, 65535, 1 << 16, ^uint32(0)} {
			wantNack(t, f, reqSetVringNum, vringState(0, n))
		}
		for _, q := range []uint32{3, 255, 256, ^uint32(0)} {
			wantNack(t, f, reqSetVringNum, vringState(q, 256))
		}
		wantAlive(t, f)
	}},
	{"SET_VRING_ADDR outside memory", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		f.mustAsk(reqSetMemTable, memTable(ram.region()), ram.fd)
		f.mustAsk(reqSetVringNum, vringState(0, 256))
		in := uint64(userAddrBase)
		for _, a := range [][3]uint64{
			{0, in + 0x1000, in + 0x2000},
			{in, 0x1000, in + 0x2000},
			{in, in + 0x1000, ^uint64(0) - 8},
			{in + 1<<20 - 16, in + 0x1000, in + 0x2000}, // runs off the end
			{in, in + 1<<20 - 4, in + 0x2000},
		} {
			wantNack(t, f, reqSetVringAddr, vringAddr(0, a[0], a[1], a[2]))
		}
		wantNack(t, f, reqSetVringAddr, vringAddr(7, in, in+0x1000, in+0x2000))
		wantAlive(t, f)
	}},
	{"SET_VRING_ADDR misaligned", func(t *testing.T, e *env) {
		f, ram := ownedWithRAM(t, e, 1<<20)
		f.mustAsk(reqSetMemTable, memTable(ram.region()), ram.fd)
		f.mustAsk(reqSetVringNum, vringState(0, 256))
		in := uint64(userAddrBase)
		for _, a := range [][3]uint64{
			{in + 1, in + 0x1000, in + 0x2000},
			{in, in + 0x1001, in + 0x2000},
			{in, in + 0x1000, in + 0x2001},
		} {
			wantNack(t, f, reqSetVringAddr, vringAddr(0, a[0], a[1], a[2]))
		}
		// The log flag asks for dirty logging we do not offer.
		p := vringAddr(0, in, in+0x2000, in+0x1000)
		le.PutUint32(p[4:], 1)
		wantNack(t, f, reqSetVringAddr, p)
		wantAlive(t, f)
	}},
	{"rings overlapping each other", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.get(reqGetVringBase, vringState(0, 0)) // stop the ring to move it
		in := uint64(userAddrBase)
		// Accepted or not, a ring whose parts overlap can break only itself.
		s.ask(reqSetVringAddr, vringAddr(0, in, in, in))
		s.ask(reqSetVringBase, vringState(0, 0))
		s.ask(reqSetVringKick, u64(0), s.kicks[0])
		s.publish(abi.QueueControl, 0)
		kick(s.kicks[0])
		wantDaemonAlive(t, e, 200*time.Millisecond)
	}},
	{"SET_VRING_BASE huge", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		for _, b := range []uint32{1 << 16, 1<<16 + 1, 1 << 31, ^uint32(0)} {
			wantNack(t, f, reqSetVringBase, vringState(0, b))
		}
		wantAlive(t, f)
	}},
	{"SET_VRING_BASE then kick", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.get(reqGetVringBase, vringState(0, 0))
		s.mustAsk(reqSetVringBase, vringState(0, 65535))
		s.mustAsk(reqSetVringKick, u64(0), s.kicks[0])
		kick(s.kicks[0])
		wantDaemonAlive(t, e, 200*time.Millisecond)
	}},
	{"kick and call that are not eventfds", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		ram := newGuestRAM(t, 4096)
		for _, fd := range []int{pipeFD(t), devNull(t), ram.fd} {
			wantNack(t, f, reqSetVringKick, u64(0), fd)
			wantNack(t, f, reqSetVringCall, u64(0), fd)
			wantNack(t, f, reqSetVringErr, u64(0), fd)
		}
		wantAlive(t, f)
	}},
	{"kick before addresses", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		kfd := newEventFD(t)
		f.ask(reqSetVringKick, u64(0), kfd)
		f.ask(reqSetVringEnable, vringState(0, 1))
		kick(kfd)
		f.ask(reqSetVringNum, vringState(0, 256))
		kick(kfd)
		wantDaemonAlive(t, e, 100*time.Millisecond)
		wantAlive(t, f)
	}},
	{"avail index runs ahead", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpQueryDevice, nil)
		s.setAvailIdx(abi.QueueControl, s.avail[abi.QueueControl]+queueSize+1)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"descriptor loop", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		copy(s.ram.mem[cmdReq(0):], abi.AppendRequest(nil, abi.OpQueryDevice, nil))
		s.putDesc(abi.QueueControl, 0, cmdReq(0), 8, descNext, 1)
		s.putDesc(abi.QueueControl, 1, cmdResp(0), 16, descNext|descWrite, 0)
		s.publish(abi.QueueControl, 0)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"self-referencing descriptor", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.putDesc(abi.QueueControl, 5, cmdReq(0), 8, descNext, 5)
		s.publish(abi.QueueControl, 5)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"chain outside memory", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.putDesc(abi.QueueControl, 0, 1<<40, 8, descNext, 1)
		s.putDesc(abi.QueueControl, 1, ramSize-8, 4096, descWrite, 0) // runs off the end
		s.publish(abi.QueueControl, 0)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"next index past the table", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.putDesc(abi.QueueControl, 0, cmdReq(0), 8, descNext, 4000)
		s.publish(abi.QueueControl, 0)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"head index past the table", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.publish(abi.QueueControl, 300)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"bad indirect table", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		const descIndirect = 4
		s.putDesc(abi.QueueControl, 0, cmdReq(1), 17, descIndirect, 0) // not a multiple of 16
		s.publish(abi.QueueControl, 0)
		kick(s.kicks[abi.QueueControl])
		wantNeedsReset(t, s)
	}},
	{"kicks on every queue of a broken device", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.publish(abi.QueueControl, 300)
		for range 100 {
			for q := range numQueues {
				kick(s.kicks[q])
			}
		}
		wantNeedsReset(t, s)
	}},
}

// wantNeedsReset waits for the device to report DEVICE_NEEDS_RESET on
// GET_STATUS.
func wantNeedsReset(t *testing.T, s *session) {
	t.Helper()
	var st uint64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		body, err := s.get(reqGetStatus, nil)
		if err != nil || len(body) != 8 {
			t.Fatalf("GET_STATUS: %x %v", body, err)
		}
		if st = le.Uint64(body); st&statusNeedsReset != 0 {
			return
		}
	}
	t.Errorf("device status %#x after the ring broke: no DEVICE_NEEDS_RESET", st)
}
