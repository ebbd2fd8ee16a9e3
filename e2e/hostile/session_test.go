package hostile

import (
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// A full attacker session: features, owner, memory and three running
// split rings in the attacker's memfd, as the virtio 1.x split-ring layout
// lays them out (descriptors 16 bytes each; avail: flags, idx, ring[];
// used: flags, idx, ring[] of {id u32, len u32}).

const (
	numQueues = 3
	queueSize = 256
	ramSize   = 4 << 20
	ringSpan  = 0x4000 // one queue's three rings
	descOff   = 0x0000
	availOff  = 0x1000
	usedOff   = 0x2000
	dataBase  = 0x100000 // command buffers and everything else the cases write
	descNext  = 1
	descWrite = 2
)

type session struct {
	*frontEnd
	ram   *guestRAM
	kicks [numQueues]int
	calls [numQueues]int
	avail [numQueues]uint16 // next avail index per queue
	cfg   abi.Config
}

func ringBase(q int) uint64 { return uint64(q) * ringSpan }

// negotiate runs the connect sequence up to SET_OWNER and SET_FEATURES.
func negotiate(t *testing.T, f *frontEnd) {
	t.Helper()
	feats, err := f.get(reqGetFeatures, nil)
	if err != nil || len(feats) != 8 {
		t.Fatalf("GET_FEATURES: %d bytes, %v", len(feats), err)
	}
	pf, err := f.get(reqGetProtocolFeatures, nil)
	if err != nil || len(pf) != 8 {
		t.Fatalf("GET_PROTOCOL_FEATURES: %d bytes, %v", len(pf), err)
	}
	want := uint64(protoMQ | protoReplyAck | protoConfig | protoResetDevice | protoMemSlots | protoStatus)
	if err := f.send(reqSetProtocolFeatures, flagV1, u64(le.Uint64(pf)&want)); err != nil {
		t.Fatal(err)
	}
	f.mustAsk(reqSetOwner, nil)
	// No shared-memory doorbells (no SHMEM, no back-end channel): the
	// device runs in the guest-RAM fallback, all of it in our memfd.
	acked := le.Uint64(feats) & (featVersion1 | featEventIdx | featProtocolFeats | (1<<24 - 1)) &^ abi.FeatureShmemDoorbell.Mask()
	f.mustAsk(reqSetFeatures, u64(acked))
}

// newSession connects to socket and starts every ring.
func newSession(t *testing.T, socket string) *session {
	t.Helper()
	s := &session{frontEnd: dialFrontEnd(t, socket), ram: newGuestRAM(t, ramSize)}
	negotiate(t, s.frontEnd)
	s.mustAsk(reqSetMemTable, memTable(s.ram.region()), s.ram.fd)
	for q := range numQueues {
		s.kicks[q], s.calls[q] = newEventFD(t), newEventFD(t)
		s.configureRing(q)
	}
	cfg, err := s.get(reqGetConfig, append(le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 0), abi.ConfigSize), 0), make([]byte, abi.ConfigSize)...))
	if err != nil || len(cfg) != 12+abi.ConfigSize {
		t.Fatalf("GET_CONFIG: %d bytes, %v", len(cfg), err)
	}
	if err := s.cfg.UnmarshalBinary(cfg[12:]); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *session) configureRing(q int) {
	s.t.Helper()
	b := ringBase(q)
	s.mustAsk(reqSetVringNum, vringState(uint32(q), queueSize))
	s.mustAsk(reqSetVringBase, vringState(uint32(q), 0))
	s.mustAsk(reqSetVringAddr, vringAddr(uint32(q), userAddrBase+b+descOff, userAddrBase+b+usedOff, userAddrBase+b+availOff))
	s.mustAsk(reqSetVringCall, u64(uint64(q)), s.calls[q])
	s.mustAsk(reqSetVringKick, u64(uint64(q)), s.kicks[q])
	s.mustAsk(reqSetVringEnable, vringState(uint32(q), 1))
}

// Ring accessors on the attacker's mapping.

func (s *session) putDesc(q int, i uint16, addr uint64, n uint32, flags, next uint16) {
	d := s.ram.mem[ringBase(q)+descOff+uint64(i%queueSize)*16:]
	le.PutUint64(d, addr)
	le.PutUint32(d[8:], n)
	le.PutUint16(d[12:], flags)
	le.PutUint16(d[14:], next)
}

// publish puts head in the avail ring and moves avail.idx on.
func (s *session) publish(q int, head uint16) {
	a := s.ram.mem[ringBase(q)+availOff:]
	le.PutUint16(a[4+2*uint64(s.avail[q]%queueSize):], head)
	s.avail[q]++
	le.PutUint16(a[2:], s.avail[q])
}

// setAvailIdx writes avail.idx directly (for indices that run ahead).
func (s *session) setAvailIdx(q int, idx uint16) {
	le.PutUint16(s.ram.mem[ringBase(q)+availOff+2:], idx)
}

func (s *session) usedIdx(q int) uint16 { return le.Uint16(s.ram.mem[ringBase(q)+usedOff+2:]) }

// waitUsed waits until the used index reaches want.
func (s *session) waitUsed(q int, want uint16, d time.Duration) error {
	deadline := time.Now().Add(d)
	for s.usedIdx(q) != want {
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %d: used index %d, want %d", q, s.usedIdx(q), want)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// postEventBuffers posts n device-writable 16-byte buffers on the event
// queue, at dataBase+0x100000.
func (s *session) postEventBuffers(n int) {
	for i := range n {
		d := uint16(i)
		s.putDesc(abi.QueueEvent, d, dataBase+0x100000+uint64(i)*abi.EventSize, abi.EventSize, descWrite, 0)
		s.publish(abi.QueueEvent, d)
	}
	kick(s.kicks[abi.QueueEvent])
}

// Control commands (docs/spec.md §7): slot k of a batch uses descriptors
// 2k and 2k+1, the request at dataBase+k*cmdSpan and the response 4 KiB
// after it.
const (
	cmdSpan  = 0x2000
	maxBatch = queueSize / 2
)

func cmdReq(k int) uint64  { return dataBase + uint64(k)*cmdSpan }
func cmdResp(k int) uint64 { return cmdReq(k) + 0x1000 }

// commands runs reqs (each a full request, header included) as one batch
// and returns the status of each.
func (s *session) commands(reqs ...[]byte) ([]abi.Status, [][]byte, error) {
	if len(reqs) > maxBatch {
		return nil, nil, fmt.Errorf("batch of %d commands", len(reqs))
	}
	start := s.avail[abi.QueueControl]
	for k, r := range reqs {
		copy(s.ram.mem[cmdReq(k):cmdReq(k)+0x1000], r)
		clear(s.ram.mem[cmdResp(k) : cmdResp(k)+8])
		d := uint16(2 * k)
		s.putDesc(abi.QueueControl, d, cmdReq(k), uint32(len(r)), descNext, d+1)
		s.putDesc(abi.QueueControl, d+1, cmdResp(k), 0x1000, descWrite, 0)
		s.publish(abi.QueueControl, d)
	}
	kick(s.kicks[abi.QueueControl])
	if err := s.waitUsed(abi.QueueControl, start+uint16(len(reqs)), 10*time.Second); err != nil {
		return nil, nil, err
	}
	// Completions may come in any order: match them by head.
	usedLen := make(map[uint32]uint32, len(reqs))
	for i := range uint16(len(reqs)) {
		elem := s.ram.mem[ringBase(abi.QueueControl)+usedOff+4+uint64((start+i)%queueSize)*8:]
		usedLen[le.Uint32(elem)] = le.Uint32(elem[4:])
	}
	sts := make([]abi.Status, len(reqs))
	bodies := make([][]byte, len(reqs))
	for k := range reqs {
		n, ok := usedLen[uint32(2*k)]
		if !ok || n > 0x1000 {
			return nil, nil, fmt.Errorf("command %d: used length %d (completed: %v)", k, n, ok)
		}
		st, body, err := abi.DecodeResponse(s.ram.mem[cmdResp(k) : cmdResp(k)+uint64(n)])
		if err != nil {
			return nil, nil, err
		}
		sts[k], bodies[k] = st, body
	}
	return sts, bodies, nil
}

// command runs one control command.
func (s *session) command(op abi.Opcode, payload []byte) (abi.Status, []byte, error) {
	sts, bodies, err := s.commands(abi.AppendRequest(nil, op, payload))
	if err != nil {
		return 0, nil, err
	}
	return sts[0], bodies[0], nil
}

// mustCommand runs a command that must succeed and returns its response.
func (s *session) mustCommand(op abi.Opcode, payload []byte) []byte {
	s.t.Helper()
	st, body, err := s.command(op, payload)
	if err != nil || st != abi.StatusOK {
		s.t.Fatalf("%v: %v %v", op, st, err)
	}
	return body
}

// wantStatus runs a command and checks its status.
func (s *session) wantStatus(op abi.Opcode, payload []byte, want abi.Status) {
	s.t.Helper()
	st, _, err := s.command(op, payload)
	if err != nil {
		s.t.Fatalf("%v: %v", op, err)
	}
	if st != want {
		s.t.Errorf("%v: status %v, want %v", op, st, want)
	}
}

func enc(v any) []byte { return abi.EncodePayload(nil, v) }

// doorbellArea registers a fallback doorbell area at gpa and returns its length.
func (s *session) doorbellArea(gpa uint64) uint64 {
	s.t.Helper()
	n := s.cfg.Doorbell.Size()
	s.mustCommand(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: gpa, Length: n}))
	return n
}
