package engine

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// maxMessage is the largest message (the port's max_msg_sz): larger
// requests complete with LOC_LEN_ERR.
const maxMessage = 1 << 31

// gatherSGEs translates the n SGEs encoded at the start of b (a copy of
// the WQE, never guest memory) through the MTT with protection domain pd,
// needing access need, and appends the host views to dst; h takes the pin
// references the DMA holds until it is over. It returns the
// views, the total length and the completion status: LOC_PROT_ERR for any
// key, PD, access or range problem (and for a WQE whose SGE array does not
// fit b, which DecodeSendWQE already rules out). Zero-length SGEs are
// skipped without a key check, as on hardware.
func gatherSGEs(mtt *emtt.Table, h *pvdma.Hold, dst []guestmem.View, b []byte, n int, pd uint32, need abi.Access) ([]guestmem.View, uint64, abi.WCStatus) {
	if n < 0 || n*abi.SGESize > len(b) {
		return dst, 0, abi.WCLocQPOpErr
	}
	var total uint64
	for i := range n {
		s := abi.DecodeSGE(b[i*abi.SGESize:])
		if s.Length == 0 {
			continue
		}
		if mtt == nil {
			return dst, 0, abi.WCLocProtErr
		}
		var err error
		dst, err = mtt.Translate(dst, h, emtt.Key(s.LKey), pd, need, s.Addr, uint64(s.Length))
		if err != nil {
			return dst, 0, abi.WCLocProtErr
		}
		total += uint64(s.Length)
	}
	return dst, total, abi.WCSuccess
}
