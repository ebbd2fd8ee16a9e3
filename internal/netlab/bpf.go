//go:build linux

package netlab

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Minimal bpf(2) glue for the loss filter and the delay line: array maps
// and hand-assembled SCHED_CLS programs. Attribute structs carry pointers as
// unsafe.Pointer (64-bit only) so the garbage collector tracks them.

const (
	bpfMapCreate     = 0
	bpfMapLookupElem = 1
	bpfMapUpdateElem = 2
	bpfProgLoad      = 5

	bpfMapTypeArray     = 2
	bpfProgTypeSchedCls = 3
)

type bpfMapCreateAttr struct {
	mapType    uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
}

type bpfMapElemAttr struct {
	mapFd uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

type bpfProgLoadAttr struct {
	progType    uint32
	insnCnt     uint32
	insns       unsafe.Pointer
	license     unsafe.Pointer
	logLevel    uint32
	logSize     uint32
	logBuf      unsafe.Pointer
	kernVersion uint32
	progFlags   uint32
	progName    [16]byte
}

// bpfCall makes a bpf(2) call. A program load the kernel cut short
// because a signal was pending comes back with EAGAIN (the verifier checks
// for signals, and the Go runtime preempts goroutines with SIGURG), so it
// is made again, a bounded number of times, as cilium/ebpf does; EINTR is
// retried likewise for every command.
func bpfCall(cmd uintptr, attr unsafe.Pointer, size uintptr) (int, error) {
	for attempt := 1; ; attempt++ {
		r, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
		switch {
		case errno == 0:
			return int(r), nil
		case attempt < bpfAttempts && (errno == unix.EINTR || errno == unix.EAGAIN && cmd == bpfProgLoad):
			continue
		}
		return -1, errno
	}
}

// bpfAttempts bounds bpfCall's retries.
const bpfAttempts = 10

func bpfArrayMap(valueSize, entries uint32) (int, error) {
	attr := bpfMapCreateAttr{mapType: bpfMapTypeArray, keySize: 4, valueSize: valueSize, maxEntries: entries}
	fd, err := bpfCall(bpfMapCreate, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		return -1, fmt.Errorf("netlab: bpf map create: %w", err)
	}
	return fd, nil
}

func bpfMapUpdate(fd int, key uint32, value []byte) error {
	attr := bpfMapElemAttr{mapFd: uint32(fd), key: unsafe.Pointer(&key), value: unsafe.Pointer(&value[0])}
	_, err := bpfCall(bpfMapUpdateElem, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(value)
	if err != nil {
		return fmt.Errorf("netlab: bpf map update: %w", err)
	}
	return nil
}

func bpfMapLookup(fd int, key uint32, value []byte) error {
	attr := bpfMapElemAttr{mapFd: uint32(fd), key: unsafe.Pointer(&key), value: unsafe.Pointer(&value[0])}
	_, err := bpfCall(bpfMapLookupElem, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(value)
	if err != nil {
		return fmt.Errorf("netlab: bpf map lookup: %w", err)
	}
	return nil
}

// bpfLoadSchedCls loads a tc classifier program. On failure it reloads with
// the verifier log enabled so the error says why.
func bpfLoadSchedCls(name string, insns []bpfInsn) (int, error) {
	code := make([]byte, 0, len(insns)*8)
	for _, in := range insns {
		code = in.append(code)
	}
	license := []byte("Dual MIT/GPL\x00")
	attr := bpfProgLoadAttr{
		progType: bpfProgTypeSchedCls,
		insnCnt:  uint32(len(insns)),
		insns:    unsafe.Pointer(&code[0]),
		license:  unsafe.Pointer(&license[0]),
	}
	copy(attr.progName[:len(attr.progName)-1], name)
	fd, err := bpfCall(bpfProgLoad, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err == nil {
		runtime.KeepAlive(code)
		runtime.KeepAlive(license)
		return fd, nil
	}
	log := make([]byte, 64<<10)
	attr.logLevel = 1
	attr.logSize = uint32(len(log))
	attr.logBuf = unsafe.Pointer(&log[0])
	if fd2, err2 := bpfCall(bpfProgLoad, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err2 == nil {
		// Loads with logging on; should not happen, but do not leak it.
		unix.Close(fd2)
	}
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	runtime.KeepAlive(log)
	n := 0
	for n < len(log) && log[n] != 0 {
		n++
	}
	return -1, fmt.Errorf("netlab: bpf program load: %w (verifier: %q)", err, log[:n])
}

// bpfInsn is one eBPF instruction.
type bpfInsn struct {
	op       uint8
	dst, src uint8
	off      int16
	imm      int32
}

func (in bpfInsn) append(b []byte) []byte {
	b = append(b, in.op, in.dst&0xf|in.src<<4)
	b = binary.LittleEndian.AppendUint16(b, uint16(in.off))
	return binary.LittleEndian.AppendUint32(b, uint32(in.imm))
}

// Opcodes and helpers used by the programs (include/uapi/linux/bpf.h).
const (
	opLdImm64     = 0x18 // BPF_LD | BPF_DW | BPF_IMM, two slots
	opLdxW        = 0x61 // BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src+off)
	opStW         = 0x62 // BPF_ST | BPF_MEM | BPF_W: *(u32 *)(dst+off) = imm
	opStDW        = 0x7a // BPF_ST | BPF_MEM | BPF_DW
	opLdxDW       = 0x79 // BPF_LDX | BPF_MEM | BPF_DW: dst = *(u64 *)(src+off)
	opAtomicAdd   = 0xdb // BPF_STX | BPF_ATOMIC | BPF_DW, imm = BPF_ADD
	opMov64Reg    = 0xbf
	opMov64Imm    = 0xb7
	opAdd64Imm    = 0x07
	opRsh64Imm    = 0x77
	opAnd64Imm    = 0x57
	opJeqImm      = 0x15
	opJltReg      = 0xad
	opCall        = 0x85
	opExit        = 0x95
	pseudoMapFd   = 1
	fnMapLookup   = 1
	fnKtimeGetNs  = 5 // CLOCK_MONOTONIC
	fnPrandomU32  = 7
	fnSkbVlanPush = 18 // bpf_skb_vlan_push(skb, be16 proto, tci): hw-accel tag
	fnRedirect    = 23 // bpf_redirect(ifindex, flags): TC_ACT_REDIRECT

	tcActUnspec = -1 // go on with the next filter
	tcActOK     = 0
	tcActShot   = 2

	// skbIngressIfindex is offsetof(struct __sk_buff, ingress_ifindex):
	// the device the packet was last received on, 0 if sent locally.
	skbIngressIfindex = 36
)
