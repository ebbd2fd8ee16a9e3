package vmsim

import (
	"cmp"
	"context"
	"slices"

	"github.com/vstellar/vstellar/internal/sim/frontend"
)

// The memory table as QEMU's vhost memory listener builds it: guest RAM
// and, once the back-end has mapped a file into a shared memory region,
// that range of the shared memory BAR, which is RAM to QEMU (a RAMBlock
// on the back-end's file). QEMU keeps a shadow of the table the back-end
// has and, with CONFIGURE_MEM_SLOTS, sends only the difference: the
// removed regions as REM_MEM_REG, then the new ones as ADD_MEM_REG.
// Without it, it sends the whole table with SET_MEM_TABLE.

// memRegion is one region of the table and the file behind it.
type memRegion struct {
	frontend.MemRegion
	fd int
}

// barBase is where the shared memory BAR lies: above guest RAM, at a
// 1 GiB boundary (QEMU assigns 64-bit BARs above RAM).
func barBase(memSize uint64) uint64 {
	end := uint64(highRAMBase)
	if memSize > lowRAMMax {
		end = highRAMBase + memSize - lowRAMMax
	}
	const gib = 1 << 30
	return (end + gib - 1) &^ (gib - 1)
}

// memoryTable is the table the back-end should have now, by guest
// physical address.
func (vm *VM) memoryTable() []memRegion {
	var t []memRegion
	for _, r := range vm.ram.regions {
		t = append(t, memRegion{MemRegion: r, fd: vm.ram.fd})
	}
	// The regions sit in the BAR one after the other, each aligned to
	// its (power of two) size, in shmid order.
	sizes := vm.shmem.Sizes()
	offs := map[uint8]uint64{}
	var off uint64
	for id := range frontend.MaxShmemRegions {
		sz, ok := sizes[uint8(id)]
		if !ok {
			continue
		}
		off = (off + sz - 1) / sz * sz
		offs[uint8(id)] = off
		off += sz
	}
	for _, f := range vm.shmem.Files() {
		t = append(t, memRegion{MemRegion: frontend.MemRegion{
			GuestPhys:  vm.barBase + offs[f.ShmID] + f.ShmOffset,
			Size:       f.Len,
			UserAddr:   f.Addr,
			MmapOffset: f.FdOffset,
		}, fd: f.FD})
	}
	slices.SortFunc(t, func(a, b memRegion) int { return cmp.Compare(a.GuestPhys, b.GuestPhys) })
	return t
}

// sameRegion is QEMU's reg_equal: the same guest range at the same
// address in the VMM.
func sameRegion(a, b frontend.MemRegion) bool {
	return a.GuestPhys == b.GuestPhys && a.Size == b.Size && a.UserAddr == b.UserAddr
}

// syncMemory brings the back-end's memory table (the Frontend's shadow
// of it) up to date. At a device start (start) QEMU sends SET_MEM_TABLE
// even when nothing changed; the ADD/REM_MEM_REG form only ever sends the
// difference, so a region the back-end has that the VM does not (one a
// test added through Frontend) goes too. Called with loop held.
func (vm *VM) syncMemory(ctx context.Context, start bool) error {
	fe := vm.fe
	want := vm.memoryTable()
	have := fe.MemTable()
	if !fe.HasProtocol(frontend.ProtoConfigureMemSlots) {
		if !start && slices.EqualFunc(have, want, func(a frontend.MemRegion, b memRegion) bool {
			return sameRegion(a, b.MemRegion)
		}) {
			return nil
		}
		regions := make([]frontend.MemRegion, len(want))
		fds := make([]int, len(want))
		for i, r := range want {
			regions[i], fds[i] = r.MemRegion, r.fd
		}
		return fe.SetMemTable(ctx, regions, fds)
	}
	for _, r := range have {
		if !slices.ContainsFunc(want, func(w memRegion) bool { return sameRegion(w.MemRegion, r) }) {
			if err := fe.RemMemReg(ctx, r); err != nil {
				return err
			}
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, func(r frontend.MemRegion) bool { return sameRegion(w.MemRegion, r) }) {
			if err := fe.AddMemReg(ctx, w.MemRegion, w.fd); err != nil {
				return err
			}
		}
	}
	return nil
}
