package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// verbsResult is what the verbs walk-through measured.
type verbsResult struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	SendBytes int     `json:"send_bytes"`
	SendUs    float64 `json:"send_us"`
	WriteKiB  int     `json:"write_kib"`
	WriteUs   float64 `json:"write_us"`
	ReadUs    float64 `json:"read_us"`
	FetchAdd  uint64  `json:"fetch_add_result"`
}

// endpoint is one guest's verbs objects.
type endpoint struct {
	name string
	dev  *guestdriver.Device
	pd   *guestdriver.PD
	cq   *guestdriver.CQ
	qp   *guestdriver.QP
	buf  guestdriver.Buffer
	mr   *guestdriver.MR
}

const demoBuf = 256 << 10

func newEndpoint(ctx context.Context, name string, dev *guestdriver.Device) (*endpoint, error) {
	e := &endpoint{name: name, dev: dev}
	var err error
	if e.pd, err = dev.AllocPD(ctx); err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(ctx, 64); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: e.cq, RecvCQ: e.cq,
		Cap: guestdriver.QPCap{SQSize: 32, RQSize: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}}); err != nil {
		return nil, err
	}
	if e.buf, err = dev.Alloc(demoBuf, 4096); err != nil {
		return nil, err
	}
	e.mr, err = e.pd.RegMR(ctx, e.buf, abi.AccessAll)
	return e, err
}

// wait polls e's CQ for one completion.
func (e *endpoint) wait(ctx context.Context) (guestdriver.WC, error) {
	var wc [1]guestdriver.WC
	for e.cq.Poll(wc[:]) == 0 {
		if err := ctx.Err(); err != nil {
			return wc[0], fmt.Errorf("%s: waiting for a completion: %w", e.name, err)
		}
		runtime.Gosched() // the engine completes in microseconds; a sleep would dominate

	}
	return wc[0], wc[0].Err()
}

// verbs connects an RC QP in VM a with one in VM b and moves data both
// ways with SEND/RECV, RDMA WRITE, RDMA READ and an atomic, checking every
// byte.
func (d *demo) verbs(ctx context.Context, an, bn string, adev, bdev *guestdriver.Device, via string) (*verbsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	fmt.Fprintf(d.out, "verbs: %s <-> %s, RC QPs through %s\n", an, bn, via)
	a, err := newEndpoint(ctx, an, adev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", an, err)
	}
	b, err := newEndpoint(ctx, bn, bdev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bn, err)
	}
	if err := a.qp.ConnectTo(ctx, b.qp.Endpoint()); err != nil {
		return nil, err
	}
	if err := b.qp.ConnectTo(ctx, a.qp.Endpoint()); err != nil {
		return nil, err
	}
	ga, gb := adev.GID(), bdev.GID()
	d.step("%s QP %d and %s QP %d in RTS (GIDs %s and %s)", an, a.qp.Num(), bn, b.qp.Num(), net.IP(ga[:]), net.IP(gb[:]))
	res := &verbsResult{From: an, To: bn}

	// SEND/RECV: b posts a receive, a sends a message from two SGEs.
	msg := []byte("hello from " + an + ", gathered from two buffers")
	half := len(msg) / 2
	copy(a.buf.Bytes(), msg[:half])
	copy(a.buf.Bytes()[4096:], msg[half:])
	clear(b.buf.Bytes()[:len(msg)])
	if err := b.qp.PostRecv(guestdriver.RecvWR{WRID: 7, SGL: []abi.SGE{b.mr.SGE(0, 4096)}}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := a.qp.PostSend(guestdriver.SendWR{WRID: 1, Opcode: abi.WRSend, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, uint32(half)), a.mr.SGE(4096, uint32(len(msg)-half))}}); err != nil {
		return nil, err
	}
	if _, err := a.wait(ctx); err != nil {
		return nil, fmt.Errorf("SEND: %w", err)
	}
	wc, err := b.wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("RECV: %w", err)
	}
	res.SendBytes, res.SendUs = int(wc.ByteLen), us(time.Since(t0))
	got := b.buf.Bytes()[:wc.ByteLen]
	if !bytes.Equal(got, msg) {
		return nil, fmt.Errorf("RECV got %q, want %q", got, msg)
	}
	d.step("SEND/RECV: %s received %d bytes from QP %d (wr_id %d): %q, %.0f us", bn, wc.ByteLen, wc.SrcQP, wc.WRID, got, res.SendUs)

	// RDMA WRITE: a fills its buffer with a pattern and writes it into b's
	// memory; b's CPU is not involved.
	pattern := a.buf.Bytes()[:demoBuf/2]
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	t0 = time.Now()
	if err := a.qp.PostSend(guestdriver.SendWR{WRID: 2, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, uint32(len(pattern)))}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
		return nil, err
	}
	if _, err := a.wait(ctx); err != nil {
		return nil, fmt.Errorf("WRITE: %w", err)
	}
	res.WriteKiB, res.WriteUs = len(pattern)>>10, us(time.Since(t0))
	if !bytes.Equal(b.buf.Bytes()[:len(pattern)], pattern) {
		return nil, errors.New("RDMA WRITE: bytes in the target VM differ")
	}
	d.step("RDMA WRITE: %d KiB from %s landed in %s's MR (rkey %#x) byte for byte, %.0f us", res.WriteKiB, an, bn, b.mr.RKey(), res.WriteUs)

	// RDMA READ: b reads the same bytes back from a into the second half
	// of its buffer.
	t0 = time.Now()
	if err := b.qp.PostSend(guestdriver.SendWR{WRID: 3, Opcode: abi.WRRDMARead, Signaled: true,
		SGL: []abi.SGE{b.mr.SGE(demoBuf/2, uint32(len(pattern)))}, RemoteAddr: a.mr.IOVA(), RKey: a.mr.RKey()}); err != nil {
		return nil, err
	}
	if _, err := b.wait(ctx); err != nil {
		return nil, fmt.Errorf("READ: %w", err)
	}
	res.ReadUs = us(time.Since(t0))
	if !bytes.Equal(b.buf.Bytes()[demoBuf/2:demoBuf/2+len(pattern)], pattern) {
		return nil, errors.New("RDMA READ: bytes read differ")
	}
	d.step("RDMA READ: %s read %d KiB back from %s's memory, identical, %.0f us", bn, len(pattern)>>10, an, res.ReadUs)

	// FETCH_ADD on a counter in a's memory.
	ctr := uint64(demoBuf - 8)
	binary.LittleEndian.PutUint64(a.buf.Bytes()[ctr:], 40)
	if err := b.qp.PostSend(guestdriver.SendWR{WRID: 4, Opcode: abi.WRAtomicFetchAdd, Signaled: true, CompareAdd: 2,
		SGL: []abi.SGE{b.mr.SGE(0, 8)}, RemoteAddr: a.mr.IOVA() + ctr, RKey: a.mr.RKey()}); err != nil {
		return nil, err
	}
	if _, err := b.wait(ctx); err != nil {
		return nil, fmt.Errorf("FETCH_ADD: %w", err)
	}
	old := binary.LittleEndian.Uint64(b.buf.Bytes())
	res.FetchAdd = binary.LittleEndian.Uint64(a.buf.Bytes()[ctr:])
	if old != 40 || res.FetchAdd != 42 {
		return nil, fmt.Errorf("FETCH_ADD: fetched %d, counter now %d; want 40 and 42", old, res.FetchAdd)
	}
	d.step("ATOMIC FETCH_ADD: %s added 2 to a counter in %s: fetched %d, counter now %d", bn, an, old, res.FetchAdd)

	// A forged rkey is refused with an error completion; only that QP
	// goes to error.
	if err := a.qp.PostSend(guestdriver.SendWR{WRID: 5, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x100}); err != nil {
		return nil, err
	}
	_, err = a.wait(ctx)
	if !errors.Is(err, abi.WCRemAccessErr) {
		return nil, fmt.Errorf("WRITE with a forged rkey: %v, want REM_ACCESS_ERR", err)
	}
	d.step("RDMA WRITE with a forged rkey: %v; %s's memory untouched", err, bn)
	return res, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
