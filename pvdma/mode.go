package pvdma

import (
	"fmt"
	"log/slog"
)

// Mode says when a device's guest memory is pinned.
type Mode uint8

const (
	// ModeOnDemand pins a chunk when a DMA first touches it (PVDMA, the
	// default).
	ModeOnDemand Mode = iota
	// ModeAtRegMR also pins every chunk of an MR when it is registered,
	// and keeps them pinned until DEREG_MR (what ibv_reg_mr does on a
	// host RNIC).
	ModeAtRegMR
	// ModeAll pins every memory region whole when the VMM adds it
	// (SET_MEM_TABLE, ADD_MEM_REG): the baseline SR-IOV/VFIO passthrough
	// imposes.
	ModeAll
)

func (m Mode) String() string {
	switch m {
	case ModeOnDemand:
		return "on-demand"
	case ModeAtRegMR:
		return "at-reg-mr"
	case ModeAll:
		return "all"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses a Mode's String form.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeOnDemand, ModeAtRegMR, ModeAll} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("pvdma: pin mode %q (want on-demand, at-reg-mr or all)", s)
}

// Options configure one device's cache.
type Options struct {
	Name   string // for errors and logs
	Mode   Mode
	Budget uint64 // bytes this device may pin on demand; 0 = only the host's limit
	Log    *slog.Logger
}
