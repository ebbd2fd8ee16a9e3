//go:build linux

package virtiopci

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseResources(t *testing.T) {
	// A resource file as the kernel writes it for the q35 device of the
	// test data: BAR 1 (MSI-X) a 32-bit memory BAR, BAR 2 (virtio
	// structures) and BAR 4 (shared memory) 64-bit prefetchable, BAR 5
	// an I/O BAR for the sake of the test, then the ROM, which is not a
	// BAR.
	const s = `0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000febfe000 0x00000000febfefff 0x0000000000040200
0x00000000feb00000 0x00000000feb03fff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000fea00000 0x00000000feafffff 0x000000000014220c
0x000000000000c000 0x000000000000c03f 0x0000000000040101
0x0000000000000000 0x0000000000000000 0x0000000000000000
`
	bars, err := parseResources(s)
	if err != nil {
		t.Fatal(err)
	}
	want := [6]bar{1: {0xfebfe000, 0x1000}, 2: {0xfeb00000, 0x4000}, 4: {0xfea00000, 1 << 20}}
	if bars != want {
		t.Errorf("bars %+v, want %+v", bars, want)
	}
	if _, err := parseResources("garbage\n"); err == nil {
		t.Error("garbage parsed")
	}
}

// fakeSysfs lays out the sysfs files findDevice and rebind use: devices
// by address with vendor and device ids, the device at addr bound to
// virtio-pci, and the driver directories.
func fakeSysfs(t *testing.T, devs map[string][2]string, bound string) string {
	t.Helper()
	root := t.TempDir()
	pci := filepath.Join(root, "bus/pci")
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for addr, ids := range devs {
		write(filepath.Join(pci, "devices", addr, "vendor"), ids[0]+"\n")
		write(filepath.Join(pci, "devices", addr, "device"), ids[1]+"\n")
		write(filepath.Join(pci, "devices", addr, "driver_override"), "(null)\n")
	}
	write(filepath.Join(pci, "drivers/virtio-pci/unbind"), "")
	write(filepath.Join(pci, "drivers", uioDriver, "bind"), "")
	write(filepath.Join(pci, "drivers_probe"), "")
	if bound != "" {
		if err := os.Symlink(filepath.Join(pci, "drivers/virtio-pci"), filepath.Join(pci, "devices", bound, "driver")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindDevice(t *testing.T) {
	root := fakeSysfs(t, map[string][2]string{
		"0000:00:01.0": {"0x8086", "0x29c0"},
		"0000:00:03.0": {"0x1af4", "0x1069"},
		"0000:00:02.0": {"0x1af4", "0x1069"},
		"0000:00:04.0": {"0x1af4", "0x106a"},
	}, "")
	for _, c := range []struct {
		addr   string
		device uint16
		want   string
	}{
		{"", 0x1069, "0000:00:02.0"}, // the first by address
		{"0000:00:03.0", 0x1069, "0000:00:03.0"},
		{"", 0x106a, "0000:00:04.0"},
		{"0000:00:04.0", 0x1069, ""},
		{"", 0x1041, ""},
	} {
		d, err := findDevice(root, c.addr, 0x1af4, c.device)
		switch {
		case c.want == "" && !errors.Is(err, ErrNoDevice):
			t.Errorf("%q %#x: found %q, %v", c.addr, c.device, d.addr, err)
		case c.want != "" && (err != nil || d.addr != c.want):
			t.Errorf("%q %#x: found %q, %v; want %s", c.addr, c.device, d.addr, err, c.want)
		}
	}
}

// TestRebindWrites: taking the device writes the override, unbinds the
// current driver and asks for a probe, in that order of files; with no
// kernel to act on them the device stays unbound and rebind says so.
func TestRebindWrites(t *testing.T) {
	const addr = "0000:00:02.0"
	root := fakeSysfs(t, map[string][2]string{addr: {"0x1af4", "0x106a"}}, addr)
	d := pciDev{sysfs: root, addr: addr}
	if d.driver() != "virtio-pci" {
		t.Fatalf("driver %q", d.driver())
	}
	err := d.rebind(uioDriver)
	if err == nil || !strings.Contains(err.Error(), "did not bind") {
		t.Fatalf("rebind: %v", err)
	}
	for file, want := range map[string]string{
		d.path("driver_override"):                                uioDriver + "\n",
		filepath.Join(root, "bus/pci/drivers/virtio-pci/unbind"): addr,
		filepath.Join(root, "bus/pci/drivers_probe"):             addr,
	} {
		if b, _ := os.ReadFile(file); string(b) != want {
			t.Errorf("%s holds %q, want %q", file, b, want)
		}
	}
	if err := d.rebind("no_such_driver"); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("rebind to a missing driver: %v", err)
	}
}
