package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/vstellar/vstellar/virtio/abi"
)

// The scenarios between two guests A and B, every byte checked by
// digest: they run the same on simulated guests and in real VMs. Each
// takes a connected Pair and leaves it connected (or says it broke it).

// Scenario is one named check.
type Scenario struct {
	Name string
	// Breaks says the scenario leaves a QP in error: the runner
	// reconnects the pair after it.
	Breaks bool
	Run    func(ctx context.Context, p *Pair) (Result, error)
}

// Scenarios are the checks RunVerbs runs, in order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "send-recv-gather", Run: sendRecvGather},
		{Name: "write-128k", Run: write128k},
		{Name: "read-128k", Run: read128k},
		{Name: "atomic-fetch-add", Run: fetchAdd},
		{Name: "atomic-cmp-swap", Run: cmpSwap},
		{Name: "write-with-imm", Run: writeWithImm},
		{Name: "forged-rkey", Run: forgedRKey, Breaks: true},
		{Name: "doorbell-mr-refused", Run: doorbellMR},
		{Name: "write-stream-pause", Run: streamPause},
		{Name: "write-bandwidth", Run: bandwidth},
		{Name: "write-latency-8b", Run: latency},
	}
}

// Buffer layout of the scenarios (offsets into each guest's buffer,
// which holds at least MinBuf bytes).
const (
	offSend    = 0         // A: two gather pieces; B: the receive
	offSrc128  = 128 << 10 // A: the WRITE's source, READ's target
	offDst128  = 256 << 10 // B: the WRITE's target
	offRead    = 512 << 10 // B: where READ lands
	offImm     = 768 << 10 // B: WRITE_WITH_IMM's target
	offForged  = 896 << 10 // B: what the forged WRITE aims at
	offPing    = MinBuf - 64
	offAtomic  = MinBuf - 32 // A: the counter
	offFetched = MinBuf - 24 // B: what the atomics fetch
	len128     = 128 << 10
)

// Seeds of the patterns, one per purpose so that no check passes on
// bytes another scenario left.
const (
	seedGather1 = iota + 1
	seedGather2
	seedRecvArea
	seedWrite
	seedDst
	seedImm
	seedForged
	seedStream
)

// patternAt is n bytes of Pattern(seed) from byte off of the stream.
func patternAt(seed, off, n uint64) []byte {
	b := make([]byte, off+n)
	Pattern(b, seed)
	return b[off:]
}

// expect checks that c's n bytes at off hash to want.
func expect(ctx context.Context, c *Client, what string, off, n uint64, want string) error {
	got, err := c.Digest(ctx, off, n)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s: %s's %d bytes at %#x hash to %.16s, want %.16s", what, c.Name, n, off, got, want)
	}
	return nil
}

// wc waits for one completion on c's queue q and checks it.
func (p *Pair) wc(ctx context.Context, c *Client, q Queue, wrid uint64, op abi.WCOpcode, st abi.WCStatus) (Completion, error) {
	wcs, err := c.PollN(ctx, q, 1, p.o.Wait)
	if err != nil {
		return Completion{}, err
	}
	w := wcs[0]
	if w.WRID != wrid || w.Opcode != op || w.Status != st {
		return w, fmt.Errorf("%s: completion %v, want wr %d %v %v", c.Name, w, wrid, op, st)
	}
	return w, nil
}

// sendRecvGather: B posts one receive, A SENDs a message gathered from
// two pieces of its buffer; B gets it whole, and no byte beyond it.
func sendRecvGather(ctx context.Context, p *Pair) (Result, error) {
	const n1, n2, room = 1000, 3000, 8192
	var r Result
	for _, f := range []struct {
		c         *Client
		off, n, s uint64
	}{{p.A, offSend, n1, seedGather1}, {p.A, offSend + 4096, n2, seedGather2}, {p.B, offSend, room, seedRecvArea}} {
		if err := f.c.Fill(ctx, f.off, f.n, f.s); err != nil {
			return r, err
		}
	}
	if err := p.B.PostRecv(ctx, RecvArgs{WRID: 10, SGL: []Segment{{Off: offSend, Len: room}}}); err != nil {
		return r, err
	}
	if err := p.A.PostSend(ctx, SendArgs{WRID: 20, Opcode: abi.WRSend, Signaled: true,
		SGL: []Segment{{Off: offSend, Len: n1}, {Off: offSend + 4096, Len: n2}}}); err != nil {
		return r, err
	}
	if _, err := p.wc(ctx, p.A, SendQueue, 20, abi.WCSend, abi.WCSuccess); err != nil {
		return r, err
	}
	w, err := p.wc(ctx, p.B, RecvQueue, 10, abi.WCRecv, abi.WCSuccess)
	if err != nil {
		return r, err
	}
	if w.ByteLen != n1+n2 || w.WithImm || w.SrcQP != p.SA.Endpoint.QPN {
		return r, fmt.Errorf("receive completion %v, want %d bytes from QP %d", w, n1+n2, p.SA.Endpoint.QPN)
	}
	msg := append(patternAt(seedGather1, 0, n1), patternAt(seedGather2, 0, n2)...)
	if err := expect(ctx, p.B, "received message", offSend, n1+n2, SHA256(msg)); err != nil {
		return r, err
	}
	if err := expect(ctx, p.B, "bytes after the message", offSend+n1+n2, room-n1-n2,
		SHA256(patternAt(seedRecvArea, n1+n2, room-n1-n2))); err != nil {
		return r, err
	}
	r.Bytes = n1 + n2
	r.Detail = fmt.Sprintf("SEND of 2 SGEs (%d+%d B) into one receive, %d B received, rest untouched", n1, n2, w.ByteLen)
	return r, nil
}

// write128k: A WRITEs 128 KiB into B; B holds them, its neighbouring
// bytes untouched.
func write128k(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	if err := p.A.Fill(ctx, offSrc128, len128, seedWrite); err != nil {
		return r, err
	}
	if err := p.B.Fill(ctx, offDst128, len128+4096, seedDst); err != nil {
		return r, err
	}
	if err := p.A.PostSend(ctx, SendArgs{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL:        []Segment{{Off: offSrc128, Len: len128}},
		RemoteAddr: p.SB.MR.Addr + offDst128, RKey: p.SB.MR.RKey}); err != nil {
		return r, err
	}
	if _, err := p.wc(ctx, p.A, SendQueue, 1, abi.WCRDMAWrite, abi.WCSuccess); err != nil {
		return r, err
	}
	if err := expect(ctx, p.B, "WRITE target", offDst128, len128, PatternSHA256(seedWrite, len128)); err != nil {
		return r, err
	}
	if err := expect(ctx, p.B, "bytes after the WRITE", offDst128+len128, 4096,
		SHA256(patternAt(seedDst, len128, 4096))); err != nil {
		return r, err
	}
	// A plain WRITE consumes no receive: nothing completes at B.
	if wcs, err := p.B.Poll(ctx, PollArgs{Queue: RecvQueue, Max: 4}); err != nil || len(wcs) != 0 {
		return r, errors.Join(err, fmt.Errorf("completions at the WRITE's target: %v", wcs))
	}
	r.Bytes = len128
	r.Detail = fmt.Sprintf("128 KiB into B's MR (rkey %#x), identical, next 4 KiB untouched", p.SB.MR.RKey)
	return r, nil
}

// read128k: B READs A's 128 KiB back into another part of its buffer.
func read128k(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	if err := p.A.Fill(ctx, offSrc128, len128, seedWrite); err != nil {
		return r, err
	}
	if err := p.B.Fill(ctx, offRead, len128, seedDst); err != nil {
		return r, err
	}
	if err := p.B.PostSend(ctx, SendArgs{WRID: 3, Opcode: abi.WRRDMARead, Signaled: true,
		SGL:        []Segment{{Off: offRead, Len: len128 / 2}, {Off: offRead + len128/2, Len: len128 / 2}},
		RemoteAddr: p.SA.MR.Addr + offSrc128, RKey: p.SA.MR.RKey}); err != nil {
		return r, err
	}
	w, err := p.wc(ctx, p.B, SendQueue, 3, abi.WCRDMARead, abi.WCSuccess)
	if err != nil {
		return r, err
	}
	if w.ByteLen != len128 {
		return r, fmt.Errorf("READ completion %v, want %d bytes", w, len128)
	}
	if err := expect(ctx, p.B, "READ result", offRead, len128, PatternSHA256(seedWrite, len128)); err != nil {
		return r, err
	}
	r.Bytes = len128
	r.Detail = "128 KiB read from A into two SGEs of B, identical"
	return r, nil
}

// atomic posts one atomic from B on A's counter and returns the value
// it fetched and the counter afterwards.
func (p *Pair) atomic(ctx context.Context, wrid uint64, op abi.WROpcode, cmpAdd, swap uint64) (fetched, now uint64, err error) {
	if err := p.B.Store(ctx, offFetched, make([]byte, 8)); err != nil {
		return 0, 0, err
	}
	if err := p.B.PostSend(ctx, SendArgs{WRID: wrid, Opcode: op, Signaled: true, CompareAdd: cmpAdd, Swap: swap,
		SGL: []Segment{{Off: offFetched, Len: 8}}, RemoteAddr: p.SA.MR.Addr + offAtomic, RKey: p.SA.MR.RKey}); err != nil {
		return 0, 0, err
	}
	wcOp := abi.WCFetchAdd
	if op == abi.WRAtomicCmpSwap {
		wcOp = abi.WCCompSwap
	}
	if _, err := p.wc(ctx, p.B, SendQueue, wrid, wcOp, abi.WCSuccess); err != nil {
		return 0, 0, err
	}
	f, err := p.B.Read(ctx, offFetched, 8)
	if err != nil {
		return 0, 0, err
	}
	c, err := p.A.Read(ctx, offAtomic, 8)
	if err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint64(f), binary.LittleEndian.Uint64(c), nil
}

// setCounter stores v in A's counter.
func (p *Pair) setCounter(ctx context.Context, v uint64) error {
	return p.A.Store(ctx, offAtomic, binary.LittleEndian.AppendUint64(nil, v))
}

// fetchAdd: B adds to a counter in A and fetches the old value, twice.
func fetchAdd(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	if err := p.setCounter(ctx, 40); err != nil {
		return r, err
	}
	for i, want := range [][2]uint64{{40, 42}, {42, 44}} {
		f, now, err := p.atomic(ctx, uint64(30+i), abi.WRAtomicFetchAdd, 2, 0)
		if err != nil {
			return r, err
		}
		if f != want[0] || now != want[1] {
			return r, fmt.Errorf("FETCH_ADD %d: fetched %d, counter %d; want %d and %d", i, f, now, want[0], want[1])
		}
	}
	r.Bytes = 16
	r.Detail = "B added 2 to A's counter twice: fetched 40, 42; counter 44"
	return r, nil
}

// cmpSwap: B swaps A's counter when it matches, and not when it does not.
func cmpSwap(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	if err := p.setCounter(ctx, 42); err != nil {
		return r, err
	}
	f, now, err := p.atomic(ctx, 40, abi.WRAtomicCmpSwap, 42, 1000)
	if err != nil {
		return r, err
	}
	if f != 42 || now != 1000 {
		return r, fmt.Errorf("CMP_SWAP 42->1000: fetched %d, counter %d; want 42 and 1000", f, now)
	}
	f, now, err = p.atomic(ctx, 41, abi.WRAtomicCmpSwap, 42, 7)
	if err != nil {
		return r, err
	}
	if f != 1000 || now != 1000 {
		return r, fmt.Errorf("CMP_SWAP 42->7 on 1000: fetched %d, counter %d; want 1000 unchanged", f, now)
	}
	r.Bytes = 16
	r.Detail = "42->1000 swapped (fetched 42); 42->7 on 1000 left it (fetched 1000)"
	return r, nil
}

// writeWithImm: A WRITEs with immediate data; B's receive completes with
// it and the bytes are there.
func writeWithImm(ctx context.Context, p *Pair) (Result, error) {
	const n, imm = 4096, 0xc0ffee42
	var r Result
	if err := p.A.Fill(ctx, offSend, n, seedImm); err != nil {
		return r, err
	}
	if err := p.B.PostRecv(ctx, RecvArgs{WRID: 50}); err != nil {
		return r, err
	}
	if err := p.A.PostSend(ctx, SendArgs{WRID: 51, Opcode: abi.WRRDMAWriteWithImm, Signaled: true, Imm: imm,
		SGL: []Segment{{Off: offSend, Len: n}}, RemoteAddr: p.SB.MR.Addr + offImm, RKey: p.SB.MR.RKey}); err != nil {
		return r, err
	}
	if _, err := p.wc(ctx, p.A, SendQueue, 51, abi.WCRDMAWrite, abi.WCSuccess); err != nil {
		return r, err
	}
	w, err := p.wc(ctx, p.B, RecvQueue, 50, abi.WCRecvRDMAWithImm, abi.WCSuccess)
	if err != nil {
		return r, err
	}
	if !w.WithImm || w.Imm != imm || w.ByteLen != n {
		return r, fmt.Errorf("receive completion %v, want imm %#x and %d bytes", w, imm, n)
	}
	if err := expect(ctx, p.B, "WRITE_WITH_IMM target", offImm, n, PatternSHA256(seedImm, n)); err != nil {
		return r, err
	}
	r.Bytes = n
	r.Detail = fmt.Sprintf("B's receive completed with imm %#x, %d B", w.Imm, w.ByteLen)
	return r, nil
}

// forgedRKey: a WRITE with a key B did not hand out ends in
// REM_ACCESS_ERR, and B's bytes stay as they were. A's QP is in error
// afterwards.
func forgedRKey(ctx context.Context, p *Pair) (Result, error) {
	const n = 4096
	var r Result
	if err := p.B.Fill(ctx, offForged, n, seedForged); err != nil {
		return r, err
	}
	if err := p.A.Fill(ctx, offSend, n, seedImm); err != nil {
		return r, err
	}
	forged := p.SB.MR.RKey ^ 1 // keys are index<<8|tag: B's MR's slot, another tag
	if err := p.A.PostSend(ctx, SendArgs{WRID: 60, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []Segment{{Off: offSend, Len: n}}, RemoteAddr: p.SB.MR.Addr + offForged, RKey: forged}); err != nil {
		return r, err
	}
	if _, err := p.wc(ctx, p.A, SendQueue, 60, abi.WCRDMAWrite, abi.WCRemAccessErr); err != nil {
		return r, err
	}
	if err := expect(ctx, p.B, "forged WRITE's target", offForged, n, PatternSHA256(seedForged, n)); err != nil {
		return r, err
	}
	r.Detail = fmt.Sprintf("rkey %#x (B's is %#x): REM_ACCESS_ERR, B's 4 KiB untouched", forged, p.SB.MR.RKey)
	return r, nil
}

// doorbellMR: REG_MR over each guest's doorbell region (the
// shared-memory BAR, or the guest-RAM area of the fallback), both as one
// range and as a page list, must be refused with a device status.
func doorbellMR(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	var done []string
	for _, c := range []*Client{p.A, p.B} {
		info, err := c.Info(ctx)
		if err != nil {
			return r, err
		}
		if info.Doorbells == nil {
			continue
		}
		db := *info.Doorbells
		for _, pages := range []bool{false, true} {
			_, err := c.RegMRAt(ctx, RegMRAtArgs{GPA: db.GPA, Len: db.Size, Access: abi.AccessLocalWrite, Pages: pages})
			var re *RemoteError
			if !errors.As(err, &re) || re.Status == abi.StatusOK {
				return r, fmt.Errorf("%s: REG_MR over the %s doorbell region %#x+%#x (page list %v): %v, want a device status",
					c.Name, info.DoorbellMode, db.GPA, db.Size, pages, err)
			}
			form := "range"
			if pages {
				form = "page list"
			}
			done = append(done, fmt.Sprintf("%s (%s) %s: %s", c.Name, info.DoorbellMode, form, re.Status.String()))
		}
	}
	if len(done) == 0 {
		r.Skipped = "neither guest knows its doorbell region's guest-physical address"
		return r, nil
	}
	r.Detail = "refused: " + strings.Join(done, ", ")
	return r, nil
}
