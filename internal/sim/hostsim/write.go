package hostsim

import (
	"context"
	"fmt"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/testkit/verbstest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// WriteAcross boots a VM called names[0] on a and one called names[1] on
// b (a and b may be the same host), gives each an RC QP connected to the
// other's and an n-byte MR, WRITEs n patterned bytes from the first VM's
// MR into the second's, and returns both buffers once the WRITE
// completed. Tests and tools use it to put traffic through a host.
func WriteAcross(ctx context.Context, a, b *Host, names [2]string, n int) (src, dst []byte, err error) {
	var ends [2]*verbstest.End
	for i, h := range []*Host{a, b} {
		vm, err := h.AddVM(ctx, names[i], VMOptions{MemSize: 64 << 20})
		if err != nil {
			return nil, nil, err
		}
		if ends[i], err = verbstest.New(ctx, vm.Driver, verbstest.Options{CQSize: 8, BufSize: uint64(n)}); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", names[i], err)
		}
	}
	if err := verbstest.Connect(ctx, ends[0], ends[1]); err != nil {
		return nil, nil, fmt.Errorf("%s and %s: %w", names[0], names[1], err)
	}
	src, dst = ends[0].Buf.Bytes(), ends[1].Buf.Bytes()
	for i := range src {
		src[i] = byte(i*7 + i>>11)
	}
	if err := ends[0].QP.PostSend(guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{ends[0].MR.SGE(0, uint32(n))}, RemoteAddr: ends[1].MR.IOVA(), RKey: ends[1].MR.RKey()}); err != nil {
		return nil, nil, fmt.Errorf("%s: posting the WRITE: %w", names[0], err)
	}
	var wc [1]guestdriver.WC
	for ends[0].SCQ.Poll(wc[:]) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: no completion for the WRITE: %w", names[0], err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := wc[0].Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: the WRITE: %w", names[0], err)
	}
	return src, dst, nil
}
