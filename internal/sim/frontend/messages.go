package frontend

import (
	"context"
	"fmt"
	"slices"
)

// One method per front-end request. Each sends the payload the
// specification defines and waits the way QEMU's vhost-user.c does.

// GetFeatures sends GET_FEATURES and returns the back-end's virtio features.
func (f *Frontend) GetFeatures(ctx context.Context) (uint64, error) {
	v, err := f.getU64(ctx, ReqGetFeatures, nil)
	if err == nil {
		f.features.Store(v)
	}
	return v, err
}

// SetFeatures sends SET_FEATURES. The caller includes
// 1<<FeatureProtocolFeatures when it negotiated protocol features. Like
// QEMU, it waits for the back-end only when dirty logging is being enabled.
func (f *Frontend) SetFeatures(ctx context.Context, features uint64) error {
	mode := noWait
	if features&(1<<FeatureLogAll) != 0 {
		mode = writeSync
	}
	return f.sendAck(ctx, ReqSetFeatures, u64Payload(features), nil, mode)
}

// GetProtocolFeatures sends GET_PROTOCOL_FEATURES.
func (f *Frontend) GetProtocolFeatures(ctx context.Context) (uint64, error) {
	return f.getU64(ctx, ReqGetProtocolFeatures, nil)
}

// SetProtocolFeatures sends SET_PROTOCOL_FEATURES and from then on behaves
// according to the features it set (REPLY_ACK, SHMEM, ...).
func (f *Frontend) SetProtocolFeatures(ctx context.Context, features uint64) error {
	if err := f.send(ctx, ReqSetProtocolFeatures, u64Payload(features), nil); err != nil {
		return err
	}
	f.protocol.Store(features)
	return nil
}

// SetOwner sends SET_OWNER.
func (f *Frontend) SetOwner(ctx context.Context) error {
	return f.send(ctx, ReqSetOwner, nil, nil)
}

// ResetOwner sends the deprecated RESET_OWNER.
func (f *Frontend) ResetOwner(ctx context.Context) error {
	return f.send(ctx, ReqResetOwner, nil, nil)
}

// GetQueueNum sends GET_QUEUE_NUM (needs MQ).
func (f *Frontend) GetQueueNum(ctx context.Context) (uint64, error) {
	return f.getU64(ctx, ReqGetQueueNum, nil)
}

// GetMaxMemSlots sends GET_MAX_MEM_SLOTS (needs CONFIGURE_MEM_SLOTS).
func (f *Frontend) GetMaxMemSlots(ctx context.Context) (uint64, error) {
	return f.getU64(ctx, ReqGetMaxMemSlots, nil)
}

// SetMemTable sends SET_MEM_TABLE with one fd per region, in order, and
// waits for the ack when REPLY_ACK is negotiated.
func (f *Frontend) SetMemTable(ctx context.Context, regions []MemRegion, fds []int) error {
	if len(regions) == 0 || len(regions) > MaxMemRegions {
		return fmt.Errorf("SET_MEM_TABLE with %d regions (1..%d)", len(regions), MaxMemRegions)
	}
	if len(fds) != len(regions) {
		return fmt.Errorf("SET_MEM_TABLE with %d regions but %d fds", len(regions), len(fds))
	}
	if err := f.sendAck(ctx, ReqSetMemTable, encodeMemTable(regions), fds, ackIfAck); err != nil {
		return err
	}
	f.memMu.Lock()
	f.memTab = slices.Clone(regions)
	f.memMu.Unlock()
	return nil
}

// AddMemReg sends ADD_MEM_REG with the region's fd.
func (f *Frontend) AddMemReg(ctx context.Context, r MemRegion, fd int) error {
	if err := f.need(ProtoConfigureMemSlots, ReqAddMemReg); err != nil {
		return err
	}
	if err := f.sendAck(ctx, ReqAddMemReg, encodeMemReg(r), []int{fd}, ackIfAck); err != nil {
		return err
	}
	f.memMu.Lock()
	f.memTab = append(f.memTab, r)
	f.memMu.Unlock()
	return nil
}

// RemMemReg sends REM_MEM_REG without an fd. As QEMU does, the mmap offset
// is sent as 0 (the back-end identifies the region by GPA, size and user
// address).
func (f *Frontend) RemMemReg(ctx context.Context, r MemRegion) error {
	if err := f.need(ProtoConfigureMemSlots, ReqRemMemReg); err != nil {
		return err
	}
	r.MmapOffset = 0
	if err := f.sendAck(ctx, ReqRemMemReg, encodeMemReg(r), nil, ackIfAck); err != nil {
		return err
	}
	f.memMu.Lock()
	f.memTab = slices.DeleteFunc(f.memTab, func(x MemRegion) bool {
		return x.GuestPhys == r.GuestPhys && x.Size == r.Size && x.UserAddr == r.UserAddr
	})
	f.memMu.Unlock()
	return nil
}

// SetVringNum sends SET_VRING_NUM.
func (f *Frontend) SetVringNum(ctx context.Context, index, num uint32) error {
	return f.send(ctx, ReqSetVringNum, VringState{index, num}.encode(), nil)
}

// SetVringBase sends SET_VRING_BASE (split ring: next avail index).
func (f *Frontend) SetVringBase(ctx context.Context, index, base uint32) error {
	return f.send(ctx, ReqSetVringBase, VringState{index, base}.encode(), nil)
}

// GetVringBase sends GET_VRING_BASE, which stops the ring, and returns the
// back-end's next avail index. The reply must name the same ring.
func (f *Frontend) GetVringBase(ctx context.Context, index uint32) (uint32, error) {
	h, p, _, err := f.exchange(ctx, ReqGetVringBase, Version, VringState{Index: index}.encode(), nil, true, 0)
	if err != nil {
		return 0, err
	}
	if h.Size != 8 {
		return 0, fmt.Errorf("GET_VRING_BASE: reply of %d bytes, want 8: %w", h.Size, ErrProtocol)
	}
	s := decodeVringState(p)
	if s.Index != index {
		return 0, fmt.Errorf("GET_VRING_BASE %d: reply for ring %d: %w", index, s.Index, ErrProtocol)
	}
	return s.Num, nil
}

// SetVringAddr sends SET_VRING_ADDR; it waits only with VringFlagLog set,
// as QEMU does.
func (f *Frontend) SetVringAddr(ctx context.Context, a VringAddr) error {
	mode := noWait
	if a.Flags&VringFlagLog != 0 {
		mode = writeSync
	}
	return f.sendAck(ctx, ReqSetVringAddr, a.encode(), nil, mode)
}

func (f *Frontend) setVringFile(ctx context.Context, req Request, index uint32, fd int) error {
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	return f.send(ctx, req, vringFilePayload(index, fd), fds)
}

// SetVringKick sends SET_VRING_KICK; fd < 0 sets the no-fd bit (polling).
func (f *Frontend) SetVringKick(ctx context.Context, index uint32, fd int) error {
	return f.setVringFile(ctx, ReqSetVringKick, index, fd)
}

// SetVringCall sends SET_VRING_CALL; fd < 0 sets the no-fd bit.
func (f *Frontend) SetVringCall(ctx context.Context, index uint32, fd int) error {
	return f.setVringFile(ctx, ReqSetVringCall, index, fd)
}

// SetVringErr sends SET_VRING_ERR; fd < 0 sets the no-fd bit.
func (f *Frontend) SetVringErr(ctx context.Context, index uint32, fd int) error {
	return f.setVringFile(ctx, ReqSetVringErr, index, fd)
}

// SetVringEnable sends SET_VRING_ENABLE and waits for the back-end (QEMU
// calls it synchronously so the guest cannot kick a ring the back-end
// still thinks is disabled).
func (f *Frontend) SetVringEnable(ctx context.Context, index uint32, enable bool) error {
	var num uint32
	if enable {
		num = 1
	}
	return f.sendAck(ctx, ReqSetVringEnable, VringState{index, num}.encode(), nil, writeSync)
}

// GetConfig sends GET_CONFIG for size bytes at offset and returns them.
// Like QEMU, the reply must be exactly 12+size bytes.
func (f *Frontend) GetConfig(ctx context.Context, offset, size, flags uint32) ([]byte, error) {
	if err := f.need(ProtoConfig, ReqGetConfig); err != nil {
		return nil, err
	}
	if size > MaxConfigSize {
		return nil, fmt.Errorf("GET_CONFIG of %d bytes (max %d)", size, MaxConfigSize)
	}
	h, p, _, err := f.exchange(ctx, ReqGetConfig, Version, encodeConfig(offset, flags, make([]byte, size)), nil, true, 0)
	if err != nil {
		return nil, err
	}
	if h.Size != ConfigHeaderSize+size {
		return nil, fmt.Errorf("GET_CONFIG: reply of %d bytes, want %d: %w", h.Size, ConfigHeaderSize+size, ErrProtocol)
	}
	return p[ConfigHeaderSize:], nil
}

// SetConfig sends SET_CONFIG, acked when REPLY_ACK is negotiated.
func (f *Frontend) SetConfig(ctx context.Context, offset, flags uint32, data []byte) error {
	if err := f.need(ProtoConfig, ReqSetConfig); err != nil {
		return err
	}
	if len(data) > MaxConfigSize {
		return fmt.Errorf("SET_CONFIG of %d bytes (max %d)", len(data), MaxConfigSize)
	}
	return f.sendAck(ctx, ReqSetConfig, encodeConfig(offset, flags, data), nil, ackIfAck)
}

// SetStatus sends SET_STATUS. QEMU does not wait for it. Shared memory
// mappings are the VMM's to drop (ShmemSpace.DropMappings), on its own
// reset of the device.
func (f *Frontend) SetStatus(ctx context.Context, status uint8) error {
	if err := f.need(ProtoStatus, ReqSetStatus); err != nil {
		return err
	}
	return f.send(ctx, ReqSetStatus, u64Payload(uint64(status)), nil)
}

// GetStatus sends GET_STATUS.
func (f *Frontend) GetStatus(ctx context.Context) (uint8, error) {
	if err := f.need(ProtoStatus, ReqGetStatus); err != nil {
		return 0, err
	}
	v, err := f.getU64(ctx, ReqGetStatus, nil)
	return uint8(v), err
}

// AddStatus is QEMU's vhost_user_add_status: GET_STATUS, and SET_STATUS
// with bits added unless they are all already set.
func (f *Frontend) AddStatus(ctx context.Context, bits uint8) error {
	s, err := f.GetStatus(ctx)
	if err != nil {
		return err
	}
	if s&bits == bits {
		return nil
	}
	return f.SetStatus(ctx, s|bits)
}

// ResetDevice sends RESET_DEVICE (needs RESET_DEVICE). Like SetStatus it
// leaves the shared memory mappings alone.
func (f *Frontend) ResetDevice(ctx context.Context) error {
	if err := f.need(ProtoResetDevice, ReqResetDevice); err != nil {
		return err
	}
	return f.send(ctx, ReqResetDevice, nil, nil)
}

// GetInflightFD sends GET_INFLIGHT_FD. When the reply's mmap size is not
// zero it carries an fd, which the caller owns; otherwise fd is -1.
func (f *Frontend) GetInflightFD(ctx context.Context, numQueues, queueSize uint16) (Inflight, int, error) {
	if err := f.need(ProtoInflightShmFD, ReqGetInflightFD); err != nil {
		return Inflight{}, -1, err
	}
	req := Inflight{NumQueues: numQueues, QueueSize: queueSize}
	h, p, fds, err := f.exchange(ctx, ReqGetInflightFD, Version, req.encode(), nil, true, 1)
	if err != nil {
		return Inflight{}, -1, err
	}
	if h.Size != inflightSize {
		closeFDs(fds)
		return Inflight{}, -1, fmt.Errorf("GET_INFLIGHT_FD: reply of %d bytes, want %d: %w", h.Size, inflightSize, ErrProtocol)
	}
	in := decodeInflight(p)
	if in.MmapSize == 0 {
		closeFDs(fds)
		return in, -1, nil
	}
	if len(fds) != 1 {
		return Inflight{}, -1, fmt.Errorf("GET_INFLIGHT_FD: %d-byte area without an fd: %w", in.MmapSize, ErrProtocol)
	}
	return in, fds[0], nil
}

// SetInflightFD sends SET_INFLIGHT_FD with the area's fd.
func (f *Frontend) SetInflightFD(ctx context.Context, in Inflight, fd int) error {
	if err := f.need(ProtoInflightShmFD, ReqSetInflightFD); err != nil {
		return err
	}
	return f.send(ctx, ReqSetInflightFD, in.encode(), []int{fd})
}

// GetShmemConfig sends GET_SHMEM_CONFIG, checks the 2056-byte reply and
// reserves an address range for every non-zero region (or checks that the
// regions already reserved have the same sizes). It returns the sizes
// indexed by shmid.
func (f *Frontend) GetShmemConfig(ctx context.Context) ([]uint64, error) {
	if err := f.need(ProtoShmem, ReqGetShmemConfig); err != nil {
		return nil, err
	}
	_, p, _, err := f.exchange(ctx, ReqGetShmemConfig, Version, nil, nil, true, 0)
	if err != nil {
		return nil, err
	}
	sizes, err := decodeShmemConfig(p)
	if err != nil {
		return nil, err
	}
	if err := f.shmem.Configure(sizes); err != nil {
		return nil, fmt.Errorf("GET_SHMEM_CONFIG: %w", err)
	}
	return sizes, nil
}
