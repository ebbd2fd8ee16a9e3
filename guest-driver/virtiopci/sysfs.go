//go:build linux

package virtiopci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// uioDriver is the kernel driver the device is handed to: it lets user
// space map the BARs and take the INTx interrupt through /dev/uioN.
const uioDriver = "uio_pci_generic"

// ErrNoDevice: no PCI function with the wanted ids.
var ErrNoDevice = errors.New("virtiopci: no such PCI device")

// pciDev is one PCI function in sysfs.
type pciDev struct {
	sysfs string // sysfs root, normally /sys
	addr  string // domain:bus:dev.fn, e.g. 0000:00:03.0
}

func (d pciDev) path(name ...string) string {
	return filepath.Join(append([]string{d.sysfs, "bus/pci/devices", d.addr}, name...)...)
}

// findDevice returns the PCI function with vendor and device id, the one
// at addr if addr is set, else the first by address.
func findDevice(sysfs, addr string, vendor, device uint16) (pciDev, error) {
	dir := filepath.Join(sysfs, "bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return pciDev{}, fmt.Errorf("virtiopci: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, n := range names {
		if addr != "" && n != addr {
			continue
		}
		d := pciDev{sysfs: sysfs, addr: n}
		v, err1 := readHex(d.path("vendor"))
		id, err2 := readHex(d.path("device"))
		if err1 == nil && err2 == nil && v == uint64(vendor) && id == uint64(device) {
			return d, nil
		}
	}
	where := "any address"
	if addr != "" {
		where = addr
	}
	return pciDev{}, fmt.Errorf("%04x:%04x at %s: %w", vendor, device, where, ErrNoDevice)
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 64)
}

// present reports whether the device is still in sysfs (a hot-unplug
// removes it).
func (d pciDev) present() bool {
	_, err := os.Stat(d.path())
	return err == nil
}

// driver is the name of the kernel driver bound to the device ("" none).
func (d pciDev) driver() string {
	l, err := os.Readlink(d.path("driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// writeAttr writes one sysfs attribute.
func writeAttr(path, val string) error {
	if err := os.WriteFile(path, []byte(val), 0o200); err != nil {
		return fmt.Errorf("virtiopci: write %q to %s: %w", val, path, err)
	}
	return nil
}

// rebind makes driver (empty: whatever claims the device, i.e. the
// kernel's virtio_pci) the device's driver: set driver_override, unbind
// the current driver, and ask the PCI core to probe the device again.
func (d pciDev) rebind(driver string) error {
	if driver != "" && d.driver() == driver {
		return nil
	}
	if driver != "" {
		if _, err := os.Stat(filepath.Join(d.sysfs, "bus/pci/drivers", driver)); err != nil {
			return fmt.Errorf("virtiopci: kernel driver %s is not loaded (modprobe %s): %w", driver, driver, err)
		}
	}
	// An empty override is written as a newline: the kernel clears it.
	if err := writeAttr(d.path("driver_override"), driver+"\n"); err != nil {
		return err
	}
	if cur := d.driver(); cur != "" {
		if err := writeAttr(d.path("driver", "unbind"), d.addr); err != nil {
			return err
		}
	}
	if err := writeAttr(filepath.Join(d.sysfs, "bus/pci/drivers_probe"), d.addr); err != nil {
		return err
	}
	if driver == "" {
		return nil
	}
	// A device just hot-plugged is still being probed by the kernel,
	// which holds it meanwhile and then binds it as driver_override says:
	// give that a moment, probing again, before calling it a failure.
	for wait := 5 * time.Millisecond; d.driver() != driver; wait *= 2 {
		if wait > time.Second {
			return fmt.Errorf("virtiopci: %s did not bind to %s (bound: %q)", driver, d.addr, d.driver())
		}
		time.Sleep(wait)
		if d.driver() == "" {
			writeAttr(filepath.Join(d.sysfs, "bus/pci/drivers_probe"), d.addr)
		}
	}
	return nil
}

// uioNode waits for the device's uio node (uio/uioN in sysfs) and returns
// the path of its character device under devDir, creating the node if
// no devtmpfs did.
func (d pciDev) uioNode(ctx context.Context, devDir string) (string, error) {
	var name string
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		ents, err := os.ReadDir(d.path("uio"))
		if err == nil && len(ents) > 0 {
			name = ents[0].Name()
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("virtiopci: no uio node for %s: %w", d.addr, ctx.Err())
		case <-time.After(delay):
		}
	}
	node := filepath.Join(devDir, name)
	if _, err := os.Stat(node); err == nil {
		return node, nil
	}
	b, err := os.ReadFile(d.path("uio", name, "dev"))
	if err != nil {
		return "", fmt.Errorf("virtiopci: %s: %w", name, err)
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &major, &minor); err != nil {
		return "", fmt.Errorf("virtiopci: %s dev %q: %w", name, b, err)
	}
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(major, minor))); err != nil {
		return "", fmt.Errorf("virtiopci: mknod %s: %w", node, err)
	}
	return node, nil
}

// configSpace reads the device's PCI config space (256 bytes, or 4096 as
// root on PCIe).
func (d pciDev) configSpace() ([]byte, error) {
	b, err := os.ReadFile(d.path("config"))
	if err != nil {
		return nil, fmt.Errorf("virtiopci: %w", err)
	}
	return b, nil
}

// setCommand sets bits in the PCI command register through the config
// file, keeping the others (the uio driver owns INTX_DISABLE).
func (d pciDev) setCommand(bits uint16) error {
	f, err := os.OpenFile(d.path("config"), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("virtiopci: %w", err)
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], pciCommand); err != nil {
		return fmt.Errorf("virtiopci: read command register: %w", err)
	}
	cmd := uint16(b[0]) | uint16(b[1])<<8
	if cmd&bits == bits {
		return nil
	}
	cmd |= bits
	b[0], b[1] = byte(cmd), byte(cmd>>8)
	if _, err := f.WriteAt(b[:], pciCommand); err != nil {
		return fmt.Errorf("virtiopci: write command register: %w", err)
	}
	return nil
}

// bar is a memory BAR: its bus address (the guest-physical address the
// CPU reaches it at) and size.
type bar struct{ start, size uint64 }

// bars reads the six BARs from the resource file; I/O and absent BARs
// have size 0 (only memory BARs can be mapped).
func (d pciDev) bars() ([6]bar, error) {
	b, err := os.ReadFile(d.path("resource"))
	if err != nil {
		return [6]bar{}, fmt.Errorf("virtiopci: %w", err)
	}
	return parseResources(string(b))
}

// ioresourceMem is IORESOURCE_MEM in a resource line's flags.
const ioresourceMem = 0x200

// parseResources decodes the sysfs resource file: one "start end flags"
// line per resource, BARs first.
func parseResources(s string) ([6]bar, error) {
	var bars [6]bar
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := 0; i < len(lines) && i < 6; i++ {
		var start, end, flags uint64
		if _, err := fmt.Sscanf(lines[i], "0x%x 0x%x 0x%x", &start, &end, &flags); err != nil {
			return bars, fmt.Errorf("virtiopci: resource line %d %q: %w", i, lines[i], err)
		}
		if flags&ioresourceMem != 0 && end > start {
			bars[i] = bar{start: start, size: end - start + 1}
		}
	}
	return bars, nil
}
