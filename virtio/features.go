package virtio

import (
	"fmt"
	"strings"
)

// Feature is a virtio feature bit number (not a mask). Bits 0-23 and 50 and
// above belong to the device type; 24-41 are the reserved bits below.
type Feature uint

// Reserved (device-independent) feature bits, VIRTIO 1.x "Reserved Feature
// Bits". VIRTIO_F_SUSPEND is left out on purpose: its number (42 or 43) is
// not settled in a released spec.
const (
	FeatureNotifyOnEmpty    Feature = 24 // legacy
	FeatureAnyLayout        Feature = 27 // legacy
	FeatureIndirectDesc     Feature = 28 // VIRTIO_F_INDIRECT_DESC (VIRTIO_RING_F_INDIRECT_DESC)
	FeatureEventIdx         Feature = 29 // VIRTIO_F_EVENT_IDX (VIRTIO_RING_F_EVENT_IDX)
	FeatureVersion1         Feature = 32
	FeatureAccessPlatform   Feature = 33 // formerly IOMMU_PLATFORM
	FeatureRingPacked       Feature = 34
	FeatureInOrder          Feature = 35
	FeatureOrderPlatform    Feature = 36
	FeatureSRIOV            Feature = 37
	FeatureNotificationData Feature = 38
	FeatureNotifConfigData  Feature = 39
	FeatureRingReset        Feature = 40
	FeatureAdminVQ          Feature = 41
)

var featureNames = map[Feature]string{
	FeatureNotifyOnEmpty:    "NOTIFY_ON_EMPTY",
	FeatureAnyLayout:        "ANY_LAYOUT",
	FeatureIndirectDesc:     "INDIRECT_DESC",
	FeatureEventIdx:         "EVENT_IDX",
	FeatureVersion1:         "VERSION_1",
	FeatureAccessPlatform:   "ACCESS_PLATFORM",
	FeatureRingPacked:       "RING_PACKED",
	FeatureInOrder:          "IN_ORDER",
	FeatureOrderPlatform:    "ORDER_PLATFORM",
	FeatureSRIOV:            "SR_IOV",
	FeatureNotificationData: "NOTIFICATION_DATA",
	FeatureNotifConfigData:  "NOTIF_CONFIG_DATA",
	FeatureRingReset:        "RING_RESET",
	FeatureAdminVQ:          "ADMIN_VQ",
}

// Mask returns the 64-bit feature word with only f set. Feature bits of 64
// and above do not fit the vhost-user u64 feature word and give 0.
func (f Feature) Mask() uint64 {
	if f >= 64 {
		return 0
	}
	return 1 << f
}

// In reports whether f is set in the feature word mask.
func (f Feature) In(mask uint64) bool { return f < 64 && mask&(1<<f) != 0 }

func (f Feature) String() string {
	if n, ok := featureNames[f]; ok {
		return n
	}
	return fmt.Sprintf("bit%d", uint(f))
}

// FeatureMask returns the feature word with the given bits set.
func FeatureMask(fs ...Feature) uint64 {
	var m uint64
	for _, f := range fs {
		m |= f.Mask()
	}
	return m
}

// Status is the device status byte (VIRTIO 1.x "Device Status Field").
type Status uint8

// Device status bits.
const (
	StatusAcknowledge      Status = 1
	StatusDriver           Status = 2
	StatusDriverOK         Status = 4
	StatusFeaturesOK       Status = 8
	StatusDeviceNeedsReset Status = 64
	StatusFailed           Status = 128
)

var statusNames = []struct {
	s    Status
	name string
}{
	{StatusAcknowledge, "ACKNOWLEDGE"},
	{StatusDriver, "DRIVER"},
	{StatusDriverOK, "DRIVER_OK"},
	{StatusFeaturesOK, "FEATURES_OK"},
	{StatusDeviceNeedsReset, "DEVICE_NEEDS_RESET"},
	{StatusFailed, "FAILED"},
}

// Has reports whether all bits of x are set in s.
func (s Status) Has(x Status) bool { return s&x == x }

// String lists the set bits, e.g. "ACKNOWLEDGE|DRIVER|0x10"; 0 is "RESET".
func (s Status) String() string {
	if s == 0 {
		return "RESET"
	}
	var parts []string
	rest := s
	for _, n := range statusNames {
		if s&n.s != 0 {
			parts = append(parts, n.name)
			rest &^= n.s
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint8(rest)))
	}
	return strings.Join(parts, "|")
}
