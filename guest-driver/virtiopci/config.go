//go:build linux

package virtiopci

import (
	"context"
	"encoding/binary"
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// maxConfigTries bounds the generation loop: a device whose config
// changes under every read is broken.
const maxConfigTries = 16

// ReadConfig implements guestdriver.Transport: abi.ConfigSize bytes of
// the device config window (fewer if the window is smaller) in 32-bit
// reads, repeated until config_generation is the same before and after
// (VIRTIO 1.2 §2.5.1: a consistent snapshot).
func (t *Transport) ReadConfig(ctx context.Context) ([]byte, error) {
	n := min(t.devcfg.Len(), abi.ConfigSize) &^ 3
	b := make([]byte, n)
	for range maxConfigTries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("virtiopci: config space: %w", err)
		}
		before := t.cc.generation()
		for off := uint64(0); off < n; off += 4 {
			binary.LittleEndian.PutUint32(b[off:], t.devcfg.MMIORead32(off))
		}
		if t.cc.generation() == before {
			return b, nil
		}
	}
	return nil, fmt.Errorf("virtiopci: config space changed during %d reads in a row", maxConfigTries)
}

// Doorbells implements guestdriver.Transport: all of shared memory
// region abi.DoorbellShmID as mapped from its BAR.
func (t *Transport) Doorbells() (guestmem.View, error) {
	if t.shm.Len() == 0 {
		return guestmem.View{}, fmt.Errorf("virtiopci: no shared memory region %d: %w", abi.DoorbellShmID, guestdriver.ErrNoDoorbells)
	}
	return t.shm, nil
}

// AllocDMA implements guestdriver.Transport from the huge-page pool.
func (t *Transport) AllocDMA(size, align uint64) (guestdriver.Buffer, error) {
	return t.dma.alloc(size, align)
}
