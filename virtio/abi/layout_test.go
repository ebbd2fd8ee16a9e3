package abi

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// field is one expected field at a literal offset. The tests below spell
// offsets as numbers, not as the package constants, so that moving a field
// fails them.
type field struct {
	off   int
	width int // 1, 2, 4 or 8
	val   uint64
}

func expect(size int, fs []field) []byte {
	b := make([]byte, size)
	for _, f := range fs {
		switch f.width {
		case 1:
			b[f.off] = byte(f.val)
		case 2:
			binary.LittleEndian.PutUint16(b[f.off:], uint16(f.val))
		case 4:
			binary.LittleEndian.PutUint32(b[f.off:], uint32(f.val))
		case 8:
			binary.LittleEndian.PutUint64(b[f.off:], f.val)
		}
	}
	return b
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"ConfigSize", ConfigSize, 256},
		{"DeviceAttrSize", DeviceAttrSize, 160},
		{"RequestHeaderSize", RequestHeaderSize, 8},
		{"ResponseHeaderSize", ResponseHeaderSize, 8},
		{"QueryDeviceReqSize", QueryDeviceReqSize, 0},
		{"DoorbellRecordSize", DoorbellRecordSize, 64},
		{"ConfigOffReserved", ConfigOffReserved, 0x6c},
		{"attrOffReserved", attrOffReserved, 0x7c},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if ConfigSize > 256 || ConfigSize%8 != 0 || DeviceAttrSize%8 != 0 {
		t.Errorf("sizes must be multiples of 8 and config at most 256 bytes")
	}
	if DeviceID != 42 || PCIDeviceID != 0x106a || NumQueues != 3 {
		t.Errorf("device id %d pci %#x queues %d", DeviceID, PCIDeviceID, NumQueues)
	}
}

func testConfig() Config {
	return Config{
		ABIVersion: 0x00010002,
		Status:     0x11223344,
		NodeGUID:   0x0102030405060708,
		Limits: Limits{
			MaxMRSize:     0xa1a2a3a4a5a6a7a8,
			PageSizeCap:   0xb1b2b3b4b5b6b7b8,
			MaxQP:         0xc1c2c3c4,
			MaxCQ:         0xc5c6c7c8,
			MaxMR:         0xd1d2d3d4,
			MaxPD:         0xd5d6d7d8,
			MaxAH:         0xe1e2e3e4,
			MaxQPWR:       0xe5e6e7e8,
			MaxCQE:        0xf1f2f3f4,
			MaxSGE:        0xf5f6f7f8,
			MaxInlineData: 0x91929394,
			MaxQPRdAtom:   0x95969798,
			MaxGID:        0x81828384,
			MaxSRQ:        0x41424344,
			MaxSRQWR:      0x45464748,
			MaxSRQSGE:     0x494a4b4c,
		},
		PhysPortCnt: 0x71,
		Doorbell: DoorbellLayout{
			ShmID:         0x72,
			RecordSize:    0x7374,
			PageSize:      0x61626364,
			Pages:         0x65666768,
			RecordsOffset: 0x51525354,
			Records:       0x55565758,
		},
	}
}

func TestConfigLayout(t *testing.T) {
	want := expect(256, []field{
		{0x00, 4, 0x00010002}, {0x04, 4, 0x11223344}, {0x08, 8, 0x0102030405060708},
		{0x10, 8, 0xa1a2a3a4a5a6a7a8}, {0x18, 8, 0xb1b2b3b4b5b6b7b8},
		{0x20, 4, 0xc1c2c3c4}, {0x24, 4, 0xc5c6c7c8}, {0x28, 4, 0xd1d2d3d4}, {0x2c, 4, 0xd5d6d7d8},
		{0x30, 4, 0xe1e2e3e4}, {0x34, 4, 0xe5e6e7e8}, {0x38, 4, 0xf1f2f3f4}, {0x3c, 4, 0xf5f6f7f8},
		{0x40, 4, 0x91929394}, {0x44, 4, 0x95969798}, {0x48, 4, 0x81828384},
		{0x4c, 1, 0x71}, {0x4d, 1, 0x72}, {0x4e, 2, 0x7374},
		{0x50, 4, 0x61626364}, {0x54, 4, 0x65666768}, {0x58, 4, 0x51525354}, {0x5c, 4, 0x55565758},
		{0x60, 4, 0x41424344}, {0x64, 4, 0x45464748}, {0x68, 4, 0x494a4b4c},
	})
	c := testConfig()
	got, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("config encoding\n got %x\nwant %x", got, want)
	}
	var back Config
	if err := back.UnmarshalBinary(got); err != nil {
		t.Fatal(err)
	}
	if back != c {
		t.Fatalf("round trip: %+v != %+v", back, c)
	}
	// Append keeps what was there.
	app, _ := c.AppendBinary([]byte{0xee})
	if len(app) != 257 || app[0] != 0xee || !bytes.Equal(app[1:], want) {
		t.Fatalf("AppendBinary clobbered its prefix")
	}
	// The reserved tail is device-written: the driver ignores it.
	got[ConfigOffReserved], got[0xff] = 1, 1
	if err := back.UnmarshalBinary(got); err != nil || back != c {
		t.Fatalf("reserved tail not ignored: %v", err)
	}
}

func TestConfigUnmarshalLengths(t *testing.T) {
	var c Config
	for _, n := range []int{0, 1, 255, 257, 4096} {
		if err := c.UnmarshalBinary(make([]byte, n)); err == nil {
			t.Errorf("%d bytes decoded", n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	db, err := NewDoorbellLayout(DefaultLimits, 4096)
	if err != nil {
		t.Fatal(err)
	}
	good := Config{ABIVersion: ABIVersion, Limits: DefaultLimits, PhysPortCnt: 1, Doorbell: db}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	newerMinor := good
	newerMinor.ABIVersion = ABIMajor<<16 | 7
	if err := newerMinor.Validate(); err != nil {
		t.Errorf("newer minor rejected: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"major 2":        func(c *Config) { c.ABIVersion = 2 << 16 },
		"major 0":        func(c *Config) { c.ABIVersion = 0 },
		"no ports":       func(c *Config) { c.PhysPortCnt = 0 },
		"zero limit":     func(c *Config) { c.Limits.MaxQP = 0 },
		"huge limit":     func(c *Config) { c.Limits.MaxCQ = 1 << 31 },
		"shmid":          func(c *Config) { c.Doorbell.ShmID = 3 },
		"few records":    func(c *Config) { c.Doorbell.Records = 10 },
		"short region":   func(c *Config) { c.Doorbell.Pages = 1 },
		"pages not pow2": func(c *Config) { c.Doorbell.Pages = 129 },
		"odd page size":  func(c *Config) { c.Doorbell.PageSize = 5000 },
		"record size":    func(c *Config) { c.Doorbell.RecordSize = 3 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

func TestDeviceAttrLayout(t *testing.T) {
	a := DeviceAttr{
		FWVersion: 0x0102030405060708, NodeGUID: 0x1112131415161718, SysImageGUID: 0x2122232425262728,
		MaxMRSize: 0x3132333435363738, PageSizeCap: 0x4142434445464748, DeviceCapFlags: 0x5152535455565758,
		VendorID: 0x61626364, VendorPartID: 0x65666768, HWVer: 0x71727374, MaxQP: 0x75767778,
		MaxQPWR: 0x81828384, MaxSGE: 0x85868788, MaxSGERd: 0x91929394, MaxCQ: 0x95969798,
		MaxCQE: 0xa1a2a3a4, MaxMR: 0xa5a6a7a8, MaxPD: 0xb1b2b3b4, MaxQPRdAtom: 0xb5b6b7b8,
		MaxQPInitRdAtom: 0xc1c2c3c4, MaxAH: 0xc5c6c7c8, MaxInlineData: 0xd1d2d3d4,
		AtomicCap: 0xe1, PhysPortCnt: 0xe2, LocalCAAckDelay: 0xe3,
	}
	want := expect(160, []field{
		{0x00, 8, 0x0102030405060708}, {0x08, 8, 0x1112131415161718}, {0x10, 8, 0x2122232425262728},
		{0x18, 8, 0x3132333435363738}, {0x20, 8, 0x4142434445464748}, {0x28, 8, 0x5152535455565758},
		{0x30, 4, 0x61626364}, {0x34, 4, 0x65666768}, {0x38, 4, 0x71727374}, {0x3c, 4, 0x75767778},
		{0x40, 4, 0x81828384}, {0x44, 4, 0x85868788}, {0x48, 4, 0x91929394}, {0x4c, 4, 0x95969798},
		{0x50, 4, 0xa1a2a3a4}, {0x54, 4, 0xa5a6a7a8}, {0x58, 4, 0xb1b2b3b4}, {0x5c, 4, 0xb5b6b7b8},
		{0x60, 4, 0xc1c2c3c4}, {0x64, 4, 0xc5c6c7c8}, {0x68, 4, 0xd1d2d3d4},
		{0x6c, 1, 0xe1}, {0x6d, 1, 0xe2}, {0x6e, 1, 0xe3},
	})
	got, _ := a.MarshalBinary()
	if !bytes.Equal(got, want) {
		t.Fatalf("device attr encoding\n got %x\nwant %x", got, want)
	}
	var back DeviceAttr
	if err := back.UnmarshalBinary(got); err != nil || back != a {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	for _, n := range []int{0, 159, 161} {
		if err := back.UnmarshalBinary(make([]byte, n)); err == nil {
			t.Errorf("%d bytes decoded", n)
		}
	}
	if FWVersion(1, 2, 3) != 0x0000_0001_0002_0003 {
		t.Errorf("FWVersion packing")
	}
}

func TestHeaderLayout(t *testing.T) {
	h, _ := RequestHeader{Opcode: 0x01020304, Flags: 0x05060708}.MarshalBinary()
	if want := []byte{4, 3, 2, 1, 8, 7, 6, 5}; !bytes.Equal(h, want) {
		t.Errorf("request header %x, want %x", h, want)
	}
	r, _ := ResponseHeader{Status: 0x0a0b0c0d, Reserved: 0x01020304}.MarshalBinary()
	if want := []byte{0xd, 0xc, 0xb, 0xa, 4, 3, 2, 1}; !bytes.Equal(r, want) {
		t.Errorf("response header %x, want %x", r, want)
	}
	var rh ResponseHeader
	if err := rh.UnmarshalBinary(r); err != nil || rh.Status != 0x0a0b0c0d || rh.Reserved != 0x01020304 {
		t.Errorf("response header decode %+v %v", rh, err)
	}
}
