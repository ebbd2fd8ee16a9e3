package hotplug

import (
	"fmt"
	"strconv"
	"strings"
)

// MemLayout says how QEMUArgs ties guest RAM to its memory backend.
type MemLayout string

const (
	// MemNUMA: one NUMA node backed by the memfd (-numa node,memdev=).
	MemNUMA MemLayout = "numa"
	// MemMachine: the machine's RAM is the memfd (-machine
	// memory-backend=), for machines or setups without NUMA.
	MemMachine MemLayout = "machine"
)

// DefaultMemID is the memory backend's object id.
const DefaultMemID = "mem"

// Memory is the guest RAM part of a cold-plug command line: vhost-user
// needs guest RAM in a shared, fd-backed mapping the back-end can map.
type Memory struct {
	// Size is the guest RAM in bytes, a whole number of MiB. QEMUArgs
	// sets -m to it: the backend must be exactly -m.
	Size int64
	// ID is the backend's object id; default DefaultMemID.
	ID string
	// Layout: MemNUMA (default) or MemMachine.
	Layout MemLayout
}

// QEMUArgs returns the QEMU arguments that give a VM guest RAM vstellard
// can map and the devices in specs, cold-plugged:
//
//	-m SIZE
//	-object memory-backend-memfd,id=mem,size=SIZE,share=on
//	-numa node,memdev=mem   (or -machine memory-backend=mem)
//	-chardev socket,id=ID-chr,path=SOCKET[,reconnect-ms=N]
//	-device vhost-user-test-device-pci,id=ID,chardev=ID-chr,virtio-id=42,num_vqs=3,vq_size=256,config_size=256[,bus=BUS]
//
// The memfd is not preallocated (prealloc=on would touch every page at
// start-up and defeat on-demand pinning). Bad input gives an error
// wrapping ErrInvalid.
func QEMUArgs(mem Memory, specs ...Spec) ([]string, error) {
	args, err := MemoryArgs(mem)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	for _, s := range specs {
		if seen[s.ID] {
			return nil, fmt.Errorf("%w: device id %q given twice", ErrInvalid, s.ID)
		}
		seen[s.ID] = true
		da, err := DeviceArgs(s)
		if err != nil {
			return nil, err
		}
		args = append(args, da...)
	}
	return args, nil
}

// MemoryArgs is the guest RAM part of QEMUArgs.
func MemoryArgs(mem Memory) ([]string, error) {
	if mem.ID == "" {
		mem.ID = DefaultMemID
	}
	if err := ValidateID("memory backend id", mem.ID); err != nil {
		return nil, err
	}
	size, err := formatSize(mem.Size)
	if err != nil {
		return nil, err
	}
	args := []string{
		"-m", size,
		"-object", "memory-backend-memfd,id=" + mem.ID + ",size=" + size + ",share=on",
	}
	switch mem.Layout {
	case MemNUMA, "":
		args = append(args, "-numa", "node,memdev="+mem.ID)
	case MemMachine:
		args = append(args, "-machine", "memory-backend="+mem.ID)
	default:
		return nil, fmt.Errorf("%w: memory layout %q is neither %q nor %q", ErrInvalid, mem.Layout, MemNUMA, MemMachine)
	}
	return args, nil
}

// DeviceArgs is the -chardev and -device pair of one device.
func DeviceArgs(s Spec) ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	chr := "socket,id=" + s.ChardevID() + ",path=" + escapeOpt(s.Socket)
	if s.Reconnect > 0 {
		chr += ",reconnect-ms=" + strconv.FormatInt(s.Reconnect.Milliseconds(), 10)
	}
	dev := fmt.Sprintf("%s,id=%s,chardev=%s,virtio-id=%d,num_vqs=%d,vq_size=%d,config_size=%d",
		s.Driver, s.ID, s.ChardevID(), s.VirtioID, s.NumQueues, s.QueueSize, s.ConfigSize)
	if s.Bus != "" {
		dev += ",bus=" + s.Bus
	}
	return []string{"-chardev", chr, "-device", dev}, nil
}

// escapeOpt doubles commas, QEMU's escape for a comma inside an option
// value; otherwise "a,b.sock" would end the path at "a".
func escapeOpt(v string) string { return strings.ReplaceAll(v, ",", ",,") }

const (
	mib = 1 << 20
	gib = 1 << 30
	// maxMemSize is far above any host; it keeps the arithmetic exact.
	maxMemSize = 1 << 50
)

// formatSize writes a RAM size the way both -m and an object's size
// read it: a whole number of MiB or GiB with its suffix.
func formatSize(n int64) (string, error) {
	switch {
	case n <= 0 || n > maxMemSize:
		return "", fmt.Errorf("%w: memory size %d is outside 1 MiB..1 PiB", ErrInvalid, n)
	case n%mib != 0:
		return "", fmt.Errorf("%w: memory size %d is not a whole number of MiB", ErrInvalid, n)
	case n%gib == 0:
		return strconv.FormatInt(n/gib, 10) + "G", nil
	default:
		return strconv.FormatInt(n/mib, 10) + "M", nil
	}
}
