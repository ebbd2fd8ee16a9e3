package hostsim

import (
	"context"
	"fmt"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// WriteAcross boots a VM called names[0] on a and one called names[1] on
// b (a and b may be the same host), gives each an RC QP connected to the
// other's and an n-byte MR, WRITEs n patterned bytes from the first VM's
// MR into the second's, and returns both buffers once the WRITE
// completed. Tests and tools use it to put traffic through a host.
func WriteAcross(ctx context.Context, a, b *Host, names [2]string, n int) (src, dst []byte, err error) {
	var vms [2]*VM
	var qps [2]*guestdriver.QP
	var cqs [2]*guestdriver.CQ
	var mrs [2]*guestdriver.MR
	for i, h := range []*Host{a, b} {
		if vms[i], err = h.AddVM(ctx, names[i], VMOptions{MemSize: 64 << 20}); err != nil {
			return nil, nil, err
		}
		d := vms[i].Driver
		pd, err := d.AllocPD(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
		if cqs[i], err = d.CreateCQ(ctx, 8); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
		if qps[i], err = pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: cqs[i], RecvCQ: cqs[i],
			Cap: guestdriver.QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
		buf, err := d.Alloc(uint64(n), 4096)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
		if mrs[i], err = pd.RegMR(ctx, buf, abi.AccessAll); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
	}
	for i := range 2 {
		if err := qps[i].ConnectTo(ctx, qps[1-i].Endpoint()); err != nil {
			return nil, nil, fmt.Errorf("%s: connecting its QP: %w", names[i], err)
		}
	}
	src = mrs[0].Buffer().Bytes()
	for i := range src {
		src[i] = byte(i*7 + i>>11)
	}
	if err := qps[0].PostSend(guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{mrs[0].SGE(0, uint32(n))}, RemoteAddr: mrs[1].IOVA(), RKey: mrs[1].RKey()}); err != nil {
		return nil, nil, fmt.Errorf("%s: posting the WRITE: %w", names[0], err)
	}
	var wc [1]guestdriver.WC
	for cqs[0].Poll(wc[:]) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: no completion for the WRITE: %w", names[0], err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := wc[0].Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: the WRITE: %w", names[0], err)
	}
	return src, mrs[1].Buffer().Bytes(), nil
}
