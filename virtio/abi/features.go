package abi

import (
	"fmt"
	"strings"
)

// Feature is a device-specific virtio feature bit number (0-23). The
// device-independent bits (VERSION_1, EVENT_IDX, ...) live in package
// virtio.
type Feature uint

// Device feature bits. A bit is offered only when the device implements
// what it promises; the bits defined but not yet offered are listed in
// docs/spec.md.
const (
	// FeatureShmemDoorbell: doorbell records live in shared memory region
	// shmid 0 (a memfd the device maps into the guest with SHMEM_MAP),
	// never in guest RAM. The driver acks it only if its transport shows
	// shared memory region 0 at least as large as the config space says.
	// Without it (or when the map fails, see ConfigStatusDoorbellShmem)
	// the doorbells use the guest-RAM fallback registered with
	// SET_DOORBELL_AREA.
	FeatureShmemDoorbell Feature = 0
	// FeatureEventQueue: the device reports asynchronous events on
	// QueueEvent.
	FeatureEventQueue Feature = 1
	// FeatureRC: reliable-connected QPs (SEND/RECV, RDMA WRITE,
	// WRITE_WITH_IMM, RDMA READ).
	FeatureRC Feature = 2
	// FeatureUD: unreliable-datagram QPs. Reserved: not offered.
	FeatureUD Feature = 3
	// FeatureAtomic: 8-byte FETCH_ADD and CMP_SWAP on RC QPs.
	FeatureAtomic Feature = 4
	// FeatureInline: inline data in send WQEs, up to max_inline_data.
	FeatureInline Feature = 5
	// FeatureIdleWakeup: the engine may go idle and ask, in the doorbell
	// region's device page, for a kick on QueueWakeup.
	FeatureIdleWakeup Feature = 6
	// FeatureCQNotify: CQ arming; completion notifications arrive as
	// events on QueueEvent (with its used-buffer interrupt).
	FeatureCQNotify Feature = 7
	// FeatureResizeCQ: RESIZE_CQ is supported.
	FeatureResizeCQ Feature = 8
)

// LastDeviceFeature is the highest device-specific feature bit (virtio
// gives bits 0-23 to the device type).
const LastDeviceFeature Feature = 23

var featureNames = map[Feature]string{
	FeatureShmemDoorbell: "SHMEM_DOORBELL",
	FeatureEventQueue:    "EVENT_QUEUE",
	FeatureRC:            "RC",
	FeatureUD:            "UD",
	FeatureAtomic:        "ATOMIC",
	FeatureInline:        "INLINE",
	FeatureIdleWakeup:    "IDLE_WAKEUP",
	FeatureCQNotify:      "CQ_NOTIFY",
	FeatureResizeCQ:      "RESIZE_CQ",
}

// Mask is the feature word with only f set.
func (f Feature) Mask() uint64 {
	if f > LastDeviceFeature {
		return 0
	}
	return 1 << f
}

// In reports whether f is set in mask.
func (f Feature) In(mask uint64) bool { return f <= LastDeviceFeature && mask&(1<<f) != 0 }

func (f Feature) String() string {
	if n, ok := featureNames[f]; ok {
		return n
	}
	return fmt.Sprintf("dev_bit%d", uint(f))
}

// FeatureMask returns the feature word with the given bits set.
func FeatureMask(fs ...Feature) uint64 {
	var m uint64
	for _, f := range fs {
		m |= f.Mask()
	}
	return m
}

// DeviceFeatureBits is the mask of all device-specific bits (0-23).
const DeviceFeatureBits uint64 = 1<<(LastDeviceFeature+1) - 1

// FeatureString lists the device-specific bits set in mask, e.g.
// "SHMEM_DOORBELL|EVENT_QUEUE"; bits outside 0-23 are ignored.
func FeatureString(mask uint64) string {
	var parts []string
	for f := Feature(0); f <= LastDeviceFeature; f++ {
		if f.In(mask) {
			parts = append(parts, f.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}
