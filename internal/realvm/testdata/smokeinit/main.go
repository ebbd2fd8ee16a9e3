// Command smokeinit is the /init of realvm's smoke test: it reports what
// the guest kernel sees on the console, one "SMOKE" line per fact, and
// powers the VM off. Its settings come as environment variables from the
// kernel command line:
//
//	SMOKE_MODULES=uio,uio_pci_generic  modules to load from /lib/modules, in order
//	SMOKE_UIO=1af4:1055                bind that PCI id to uio_pci_generic
//	SMOKE_AGENT=1                      echo lines on ttyS1 until "quit"
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	say("init started")
	if err := run(); err != nil {
		say("error: %v", err)
	}
	say("powering off")
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		say("error: power off: %v", err)
	}
	select {}
}

func say(format string, a ...any) { fmt.Printf("SMOKE "+format+"\n", a...) }

func run() error {
	for _, m := range []struct{ fs, dir string }{{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fs, m.dir, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	say("kernel %s", unix.ByteSliceToString(u.Release[:]))

	if mods := os.Getenv("SMOKE_MODULES"); mods != "" {
		for _, m := range strings.Split(mods, ",") {
			if err := loadModule("/lib/modules/" + m + ".ko"); err != nil {
				return fmt.Errorf("module %s: %w", m, err)
			}
			say("module %s loaded", m)
		}
	}
	if err := listPCI(); err != nil {
		return err
	}
	if err := listVirtio(); err != nil {
		return err
	}
	if id := os.Getenv("SMOKE_UIO"); id != "" {
		if err := bindUIO(id); err != nil {
			return err
		}
		if err := listPCI(); err != nil {
			return err
		}
	}
	if uio, _ := filepath.Glob("/dev/uio*"); len(uio) > 0 {
		say("uio %s", strings.Join(uio, " "))
	}
	if os.Getenv("SMOKE_AGENT") == "1" {
		if err := agent("/dev/ttyS1"); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.FinitModule(int(f.Fd()), "", 0)
}

// bindUIO hands every PCI device of id (vendor:device) to
// uio_pci_generic: virtio-pci claims every virtio device first, so it is
// unbound and the device probed again with driver_override set.
func bindUIO(id string) error {
	devs, err := filepath.Glob("/sys/bus/pci/devices/*")
	if err != nil {
		return err
	}
	n := 0
	for _, d := range devs {
		if read(d, "vendor")+":"+read(d, "device") != "0x"+strings.Replace(id, ":", ":0x", 1) {
			continue
		}
		addr := filepath.Base(d)
		if err := os.WriteFile(filepath.Join(d, "driver_override"), []byte("uio_pci_generic"), 0); err != nil {
			return fmt.Errorf("%s driver_override: %w", addr, err)
		}
		if driver(d) != "none" {
			if err := os.WriteFile(filepath.Join(d, "driver", "unbind"), []byte(addr), 0); err != nil {
				return fmt.Errorf("%s unbind: %w", addr, err)
			}
		}
		if err := os.WriteFile("/sys/bus/pci/drivers_probe", []byte(addr), 0); err != nil {
			return fmt.Errorf("%s probe: %w", addr, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no PCI device %s", id)
	}
	return nil
}

func listPCI() error {
	devs, err := filepath.Glob("/sys/bus/pci/devices/*")
	if err != nil {
		return err
	}
	for _, d := range devs {
		say("pci %s %s:%s driver=%s", filepath.Base(d), strings.TrimPrefix(read(d, "vendor"), "0x"),
			strings.TrimPrefix(read(d, "device"), "0x"), driver(d))
	}
	return nil
}

func listVirtio() error {
	devs, err := filepath.Glob("/sys/bus/virtio/devices/*")
	if err != nil {
		return err
	}
	for _, d := range devs {
		say("virtio %s device=%s driver=%s", filepath.Base(d), read(d, "device"), driver(d))
	}
	return nil
}

func read(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func driver(dev string) string {
	t, err := os.Readlink(filepath.Join(dev, "driver"))
	if err != nil {
		return "none"
	}
	return filepath.Base(t)
}

// agent echoes each line from the host on tty until "quit".
func agent(tty string) error {
	f, err := os.OpenFile(tty, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// Raw, so the tty neither echoes nor rewrites what passes.
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t); err != nil {
		return err
	}
	say("agent ready")
	if _, err := fmt.Fprintf(f, "agent ready\n"); err != nil {
		return err
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if s.Text() == "quit" {
			say("agent quit")
			return nil
		}
		if _, err := fmt.Fprintf(f, "echo %s\n", s.Text()); err != nil {
			return err
		}
	}
	return s.Err()
}
