package realvm

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/vstellar/vstellar/hotplug"
)

// GuestConfig boots the guest program in agent mode, accepting the
// QEMU's virtio id for the device, with 1 GiB and the devices given.
func TestGuestConfig(t *testing.T) {
	e, err := Load(fakeHarness(t, fakeManifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		qemu   string
		append string
	}{
		{StockQEMU, "vstellar.devid=21 vstellar.mode=agent"},
		{PatchedQEMU, "vstellar.devid=42 vstellar.mode=agent"},
	} {
		cfg, err := e.GuestConfig(c.qemu, "/tmp/initrd.cpio", hotplug.Spec{Socket: "/run/a.sock"})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QEMU.Name != c.qemu || cfg.Kernel != e.Kernel.Path || cfg.Initrd != "/tmp/initrd.cpio" ||
			cfg.Memory != 1<<30 || cfg.Append != c.append || len(cfg.Devices) != 1 || cfg.Devices[0].Socket != "/run/a.sock" {
			t.Errorf("%s: %+v", c.qemu, cfg)
		}
	}
	if _, err := e.GuestConfig("qemu-0.1", "/tmp/initrd.cpio"); err == nil {
		t.Error("GuestConfig of an unknown QEMU succeeded")
	}
}

// BuildGuestImage builds the guest program and packs it as /init (a
// newc cpio archive) beside the kernel's modules.
func TestBuildGuestImage(t *testing.T) {
	e, err := Load(fakeHarness(t, fakeManifest))
	if err != nil {
		t.Fatal(err)
	}
	initrd, err := e.BuildGuestImage(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("070701")) {
		t.Fatalf("%s is no newc archive: starts %q", initrd, b[:min(len(b), 16)])
	}
	for _, name := range []string{"init\x00", "lib/modules/uio.ko\x00", "lib/modules/uio_pci_generic.ko\x00"} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("the image lacks %q", name)
		}
	}
	if len(b) < 1<<20 {
		t.Errorf("image of %d bytes: too small to hold the guest program", len(b))
	}
}
